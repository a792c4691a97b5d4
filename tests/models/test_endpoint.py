"""The look at the model server before a run (models/endpoint.py), and how a client names a server it
cannot reach during one: by the URL it used, a host that does not resolve said as such."""
from __future__ import annotations

import asyncio

import pytest

from insandbox.config import ConfigError, RunConfig
from insandbox.models import ModelError, OpenAIChatClient
from insandbox.models.endpoint import EndpointUnreachable, check_endpoint, endpoint_url
from tests.servers import free_port

TOOLS = [{"type": "function", "function": {"name": "submit", "description": "done",
                                           "parameters": {"type": "object", "properties": {}, "required": []}}}]


async def _ask(client: OpenAIChatClient) -> None:
    """One request, the client closed after it."""
    try:
        await client.complete([{"role": "user", "content": "u"}], TOOLS)
    finally:
        await client.close()


def test_a_client_says_a_host_that_does_not_resolve_is_a_dns_failure(run_async):
    """Regression: "connection refused x6" for a host name that does not exist."""
    client = OpenAIChatClient("m", base_url="http://no-such-host.invalid/v1", max_retries=1, backoff=(0.01, 0.02))
    with pytest.raises(ModelError) as err:
        run_async(_ask(client))
    text = str(err.value)
    assert text.startswith("cannot reach the model server at http://no-such-host.invalid/v1: its host name does not "
                           "resolve (DNS lookup failed)"), text
    assert "DNS lookup failed x2" in text and "connection refused" not in text


def test_a_client_without_a_base_url_names_the_url_it_used(run_async, monkeypatch):
    """Regression: "cannot reach the model server at None" when no --base-url was given."""
    url = f"http://127.0.0.1:{free_port()}/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", url)  # where the SDK goes without a base URL: nothing listens there

    with pytest.raises(ModelError) as err:
        run_async(_ask(OpenAIChatClient("m", max_retries=0, api_key="sk-x")))
    assert str(err.value).startswith(f"cannot reach the model server at {url}: "), str(err.value)
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert endpoint_url("openai", None) == "https://api.openai.com/v1"
    assert endpoint_url("anthropic", None) == "https://api.anthropic.com"


def _settings(**kw) -> RunConfig:
    return RunConfig(**kw).with_environment()


def test_the_look_needs_a_key_only_for_the_providers_own_apis(scripted, run_async, monkeypatch):
    for name in ("INSANDBOX_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "INSANDBOX_MODEL", "INSANDBOX_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="no API key for the model server at https://api.openai.com/v1"):
        run_async(check_endpoint(_settings(model="gpt-4o")))
    srv = scripted({"turns": [{"tool": "submit"}]})  # a local server: no key needed
    run_async(check_endpoint(_settings(model="anything", base_url=srv.url)))
    run_async(check_endpoint(_settings()))  # the embedded model: nothing to look at
    assert srv.requests == []  # the look is a GET of the model list, never a chat request


def test_an_endpoint_that_never_answers_is_one_error_after_a_short_wait(run_async, monkeypatch):
    import socket

    monkeypatch.setattr("insandbox.models.endpoint.TOTAL_TIMEOUT_S", 0.5)
    with socket.socket() as listener:  # accepts the connection (the backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        with pytest.raises(EndpointUnreachable, match=f"the model server at {url} did not answer within 0.5 s"):
            run_async(asyncio.wait_for(check_endpoint(_settings(model="m-silent", base_url=url)), 30))
