"""`insandbox gateway`: a token-recording model gateway, and its records, pause and resume."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from .command import Command
from .common import fail

GATEWAY_URL = typer.Option("--gateway-url", help="The gateway.", metavar="URL", envvar="INSANDBOX_GATEWAY_URL")
STORE = typer.Option(help="The gateway's store (its admin token is there).", metavar="DIR",
                     show_default="$XDG_STATE_HOME/insandbox/gateway")

app = typer.Typer(rich_markup_mode=None, invoke_without_command=True,
                  help="A model gateway that records the token ids of every turn (for RL from any harness).")


@app.callback()
def gateway(
    ctx: typer.Context,
    upstream: Annotated[Optional[str], typer.Option(
        help="The model server, OpenAI-style (vLLM >= 0.10.2, SGLang or `insandbox serve-model`), e.g. "
             "http://127.0.0.1:8000/v1.", metavar="URL")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.", metavar="ADDRESS")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", metavar="PORT")] = 8300,
    tokenizer: Annotated[Optional[str], typer.Option(
        help="The policy's tokenizer: a folder, a hub name or a GGUF file.", metavar="NAME",
        show_default="the upstream's model (the embedded model's for `insandbox serve-model`)")] = None,
    store: Annotated[Optional[Path], STORE] = None,
    upstream_api_key: Annotated[Optional[str], typer.Option(help="The upstream's API key.", metavar="KEY",
                                                            envvar="INSANDBOX_UPSTREAM_API_KEY")] = None,
    policy_version: Annotated[int, typer.Option(min=0, help="The version of the weights the upstream serves.",
                                                metavar="N")] = 0,
    max_tokens: Annotated[int, typer.Option(min=1, help="Tokens a turn samples when a request sets no "
                                                        "max_tokens.", metavar="TOKENS")] = 1024,
) -> None:
    """Serve OpenAI chat completions at http://HOST:PORT/sessions/SID/v1, sampling each turn upstream in
    token ids and recording them per session (see `insandbox gateway records`)."""
    if ctx.invoked_subcommand is not None:
        return
    if not upstream:
        fail("gateway needs --upstream URL (or a command: records, sessions, status, pause, resume)")
    from ..core.errors import ConfigError
    from ..gateway import serve

    try:
        serve(upstream, host=host, port=port, store=store, tokenizer=tokenizer, api_key=upstream_api_key,
              policy_version=policy_version, max_tokens=max_tokens,
              on_ready=lambda line: typer.echo(f"insandbox: {line}; Ctrl-C to stop", err=True))
    except ConfigError as e:
        fail(str(e))
    except OSError as e:
        fail(f"cannot listen on {host}:{port}: {e.strerror or e}", 1)
    except KeyboardInterrupt:
        pass


def _client(url: Optional[str], store: Optional[Path] = None):
    from ..gateway import GatewayClient

    if not url:
        fail("pass --gateway-url URL (or set INSANDBOX_GATEWAY_URL)")
    return GatewayClient(url, store=store)


def _call(what):
    from ..gateway import GatewayError

    try:
        return what()
    except GatewayError as e:
        fail(str(e), 1)


@app.command("records", cls=Command)
def records(
    session: Annotated[str, typer.Argument(help="The session id (SID of /sessions/SID/v1).", metavar="SID")],
    gateway_url: Annotated[Optional[str], GATEWAY_URL] = None,
) -> None:
    """Print the session's records, one JSON object per line (one per conversation it held): prompt_ids,
    response_ids, response_mask, logprobs (one per model token), policy_version."""
    data = _call(lambda: _client(gateway_url).records_json(session))
    for record in data["records"]:
        typer.echo(json.dumps(record, ensure_ascii=False))
    for rid, problems in (data.get("problems") or {}).items():
        typer.echo(f"insandbox: record {rid} fails the decode check: {problems[0]}", err=True)


@app.command("sessions", cls=Command)
def sessions(gateway_url: Annotated[Optional[str], GATEWAY_URL] = None) -> None:
    """List the gateway's sessions (id, conversations, turns)."""
    for s in _call(lambda: _client(gateway_url).sessions()):
        typer.echo(f"{s['id']}\t{s['chains']} conversation(s)\t{s['turns']} turn(s)")


@app.command("status", cls=Command)
def status(gateway_url: Annotated[Optional[str], GATEWAY_URL] = None) -> None:
    """The policy version, paused or not, requests in flight (JSON)."""
    typer.echo(json.dumps(_call(lambda: _client(gateway_url).status())))


@app.command("pause", cls=Command)
def pause(gateway_url: Annotated[Optional[str], GATEWAY_URL] = None,
          store: Annotated[Optional[Path], STORE] = None) -> None:
    """Hold new requests and wait until those in flight are answered (before a weight update)."""
    typer.echo(json.dumps(_call(lambda: _client(gateway_url, store).pause())))


@app.command("resume", cls=Command)
def resume(gateway_url: Annotated[Optional[str], GATEWAY_URL] = None,
           store: Annotated[Optional[Path], STORE] = None,
           policy_version: Annotated[Optional[int], typer.Option(
               min=0, help="The version now served; the turns sampled from here on carry it.", metavar="N")]
           = None) -> None:
    """Let requests through again, sampled as --policy-version."""
    typer.echo(json.dumps(_call(lambda: _client(gateway_url, store).resume(policy_version))))
