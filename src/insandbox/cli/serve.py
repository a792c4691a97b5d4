"""`insandbox serve-model` and `insandbox scripted-server`: model servers of insandbox's own."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import fail


def serve_model(
    gguf: Annotated[Optional[Path], typer.Option(help="GGUF model file.", metavar="FILE",
                                                 show_default="the embedded SmolLM2-135M-Instruct")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.", metavar="ADDRESS")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.", metavar="PORT")] = 8080,
    n_ctx: Annotated[Optional[int], typer.Option(help="Context window, in tokens.", metavar="TOKENS",
                                                 show_default="the model's, at most 16384")] = None,
) -> None:
    """Serve a local GGUF model (OpenAI-compatible, tool calls constrained to the tool schemas),
    so several runs or a benchmark can share one loaded model."""
    from ..models.local_server import LocalModelMissing, serve

    typer.echo(f"serving on http://{host}:{port}/v1 (Ctrl-C to stop)", err=True)
    try:
        serve(gguf, host=host, port=port, n_ctx=n_ctx)
    except LocalModelMissing as e:
        fail(str(e))
    except KeyboardInterrupt:
        pass


def scripted_server(
    script: Annotated[Path, typer.Argument(help="JSON or YAML script (see insandbox.models.scripted_server).")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8011,
    latency: Annotated[Optional[float], typer.Option(help="Seconds to wait before each answer.")] = None,
) -> None:
    """Serve a deterministic scripted model (OpenAI-compatible) for tests and demos."""
    from ..models.scripted_server import ScriptedServer

    srv = ScriptedServer(script, host=host, port=port, latency=latency, keep_requests=False)
    typer.echo(f"scripted model server on {srv.url}", err=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
