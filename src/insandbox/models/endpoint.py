"""One quick look at the model server before anything starts: a run or a benchmark that cannot reach
its server, has no key for it, or names a model it does not serve says so in one line, naming the URL it
used, before a sandbox starts or a run folder exists (instead of a minute of retries, a started sandbox
and a run folder recording the failure).

    await check_endpoint(settings)     # ConfigError (exit 2) or EndpointUnreachable (exit 1); None: go on

The look is one GET of the server's model list (`/models`; the Messages API's `/v1/models`) with a short
timeout. Only what the server cannot have meant otherwise stops the run: no answer at all (DNS, refused,
silent), a refused key (401, 403), or a list that leaves the model out from a server that serves only what
it lists (vLLM, SGLang, OpenAI's API). Any other answer (404 for a server without the route, a 500) is left
to the run itself: it reached a server.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Optional
from urllib.parse import urlparse

from ..core.errors import ConfigError, ModelError
from ..core.redact import redact
from .retrying import is_dns_failure

OPENAI_URL = "https://api.openai.com/v1"  # the SDKs' own defaults, where no --base-url is given
ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
CONNECT_TIMEOUT_S = 5.0
TOTAL_TIMEOUT_S = 10.0
# servers whose model list is all they serve (`owned_by` of its entries); others (llama.cpp's server,
# Ollama, insandbox's own) answer names they do not list, so a name missing there proves nothing
STRICT_OWNERS = frozenset({"vllm", "sglang", "openai", "system", "openai-internal"})
SHOWN_MODELS = 8  # names of served models shown in the error


class EndpointUnreachable(ModelError):
    """No answer from the model server at all (exit status 1): the one line says why and names the URL."""


def endpoint_url(api: str, base_url: Optional[str]) -> str:
    """The URL requests go to: the given base URL, else where the API's SDK goes without one (its
    environment variable, else the provider's own API)."""
    if base_url:
        return base_url
    if api == "anthropic":
        return os.environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_URL
    return os.environ.get("OPENAI_BASE_URL") or OPENAI_URL


def _hosted(url: str) -> bool:
    """One of the providers' own APIs, which never answer without a key."""
    return (urlparse(url).hostname or "") in ("api.openai.com", "api.anthropic.com")


def _list_url(api: str, url: str) -> str:
    url = url.rstrip("/")
    if api == "anthropic":  # --base-url may end in /v1 or not (anthropic_messages.api_root)
        return (url[: -len("/v1")] if url.endswith("/v1") else url) + "/v1/models"
    return url + "/models"


def _key_names(api: str) -> str:
    own = "ANTHROPIC_API_KEY" if api == "anthropic" else "OPENAI_API_KEY"
    return f"--api-key, INSANDBOX_API_KEY or {own}"


_checked: set[tuple] = set()  # (api, url, key given, model) already looked at by this process


async def check_endpoint(settings: Any) -> None:
    """Look at the model server of `settings` (a RunConfig with the environment applied) once per process:
    nothing for the embedded model; ConfigError for a missing or refused key or a model the server does not
    serve; EndpointUnreachable when nothing answers."""
    if settings.embedded:
        return
    api = settings.api
    url = endpoint_url(api, settings.base_url)
    secrets = settings.secrets()
    shown = redact(url, secrets)
    if _hosted(url) and not settings.api_key:
        raise ConfigError(f"no API key for the model server at {shown}: give {_key_names(api)}")
    model = settings.model.removeprefix("anthropic/") if settings.model and api == "anthropic" else settings.model
    seen = (api, url, bool(settings.api_key), model)
    if seen in _checked:
        return
    status, body = await _get_models(api, url, settings.api_key, shown, secrets, bool(settings.base_url))
    if status in (401, 403):
        given = "the API key was refused" if settings.api_key else "it wants an API key"
        raise ConfigError(f"the model server at {shown} answered {status}: {given} (give {_key_names(api)})")
    if status == 200 and model:
        _check_model(model, body, url, shown)
    _checked.add(seen)


async def _get_models(api: str, url: str, key: Optional[str], shown: str, secrets: set,
                      given: bool) -> tuple[int, Any]:
    import aiohttp

    headers = {}
    if api == "anthropic":
        headers = {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION} if key else {}
    elif key and urlparse(url).username is None:  # credentials in the URL go as Basic, as the client sends them
        headers = {"Authorization": f"Bearer {key}"}
    timeout = aiohttp.ClientTimeout(total=TOTAL_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:
            async with http.get(_list_url(api, url), headers=headers, allow_redirects=True) as response:
                try:
                    body = await response.json(content_type=None) if response.status == 200 else None
                except ValueError:  # not JSON: a server, just not one that lists models
                    body = None
                return response.status, body
    except asyncio.TimeoutError:
        raise EndpointUnreachable(f"the model server at {shown} did not answer within {TOTAL_TIMEOUT_S:g} s "
                                  "(is the URL right, and the server up?)") from None
    except aiohttp.InvalidURL:
        raise ConfigError(f"--base-url {shown} is not a URL (e.g. http://localhost:8000/v1)") from None
    except (aiohttp.ClientError, OSError) as e:
        raise EndpointUnreachable(redact(_unreachable(e, url, shown, given), secrets)) from None
    except ValueError:  # a request aiohttp will not make of these settings: the run's own client judges them
        return 0, None


def _unreachable(e: BaseException, url: str, shown: str, given: bool) -> str:
    host = urlparse(url).hostname or url
    if is_dns_failure(e):
        return (f"cannot reach the model server at {shown}: its host name {host!r} does not resolve (DNS lookup "
                f"failed: {'check --base-url' if given else 'is this machine online?'})")
    if _in_chain(e, ConnectionRefusedError) or "Connect call failed" in str(e):
        port = urlparse(url).port or (443 if url.startswith("https") else 80)
        return (f"cannot reach the model server at {shown}: connection refused (nothing listens on "
                f"{host}:{port}; is the server started?)")
    return f"cannot reach the model server at {shown}: {type(e).__name__}: {e}"


def _in_chain(e: Optional[BaseException], cls: type) -> bool:
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, cls) or isinstance(getattr(e, "os_error", None), cls):
            return True
        e = e.__cause__ or e.__context__
    return False


def _check_model(model: str, body: Any, url: str, shown: str) -> None:
    entries = body.get("data") if isinstance(body, dict) else None
    if not isinstance(entries, list):
        return
    names = [m.get("id") for m in entries if isinstance(m, dict) and isinstance(m.get("id"), str)]
    owners = {m.get("owned_by") for m in entries if isinstance(m, dict)}
    strict = bool(owners & STRICT_OWNERS) or (urlparse(url).hostname or "") == "api.openai.com"
    if not names or not strict or model in names:
        return
    listed = ", ".join(names[:SHOWN_MODELS]) + (f" and {len(names) - SHOWN_MODELS} more"
                                                if len(names) > SHOWN_MODELS else "")
    raise ConfigError(f"--model {model}: the model server at {shown} does not serve it (it serves: {listed})")
