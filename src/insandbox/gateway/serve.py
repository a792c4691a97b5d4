"""Starting the gateway: its tokenizer, its upstream (probed for token ids), its store, its port."""
from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from ..core.errors import ConfigError
from .app import Gateway, make_app
from .sessions import ChatFormats, Sessions
from .upstream import Upstream

ADMIN_TOKEN = "admin.token"


def default_store() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "insandbox" / "gateway"


def load_tokenizer(name: Optional[str], served: Optional[str]) -> Any:
    """The policy's tokenizer: `name` (a folder, a hub name or a GGUF file), else the one of the model the
    upstream serves (the embedded model's GGUF when that is what it serves)."""
    from ..rl.rollout.backends import load_gguf_tokenizer

    if name and name.endswith(".gguf"):
        if not Path(name).is_file():
            raise ConfigError(f"--tokenizer {name}: no such GGUF file")
        return load_gguf_tokenizer(Path(name))
    if not name:
        from ..models.local_server import LocalModelMissing, default_gguf

        try:
            embedded = default_gguf()
        except LocalModelMissing:
            embedded = None
        if embedded is not None and served in (None, embedded.stem, embedded.name):
            return load_gguf_tokenizer(embedded)
        if not served:
            raise ConfigError("the upstream does not say which model it serves: pass --tokenizer (a folder, a hub "
                              "name or a GGUF file)")
        name = served
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except Exception as e:
        raise ConfigError(f"tokenizer {name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}; pass "
                          "--tokenizer (a folder, a hub name or a GGUF file)") from None


def write_admin_token(store: Path) -> str:
    token = secrets.token_urlsafe(24)
    path = store / ADMIN_TOKEN
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    os.chmod(path, 0o600)
    return token


async def prepare(upstream_url: str, store: Path, tokenizer: Optional[str] = None, api_key: Optional[str] = None,
                  model: Optional[str] = None, dialect: Optional[str] = None, policy_version: int = 0,
                  max_tokens: int = 1024) -> Gateway:
    """A gateway ready to serve: the upstream found to return token ids (else UpstreamRefused, one line)."""
    upstream = Upstream(upstream_url, model=model, api_key=api_key, dialect=dialect)
    try:
        served = await upstream.served_model()
        tok = await asyncio.to_thread(load_tokenizer, tokenizer, served)
        upstream.model = upstream.model or served
        probe = list(tok.encode("Hello", add_special_tokens=False)) or [0]
        await upstream.probe(probe)
    except BaseException:
        await upstream.close()
        raise
    store.mkdir(parents=True, exist_ok=True)
    sessions = Sessions(store, ChatFormats(tok))
    return Gateway(upstream, sessions, write_admin_token(store), version=policy_version, max_tokens=max_tokens)


def serve(upstream_url: str, host: str = "127.0.0.1", port: int = 0, store: Optional[Path] = None,
          on_ready: Callable[[str], None] = print, **kwargs: Any) -> None:
    """Serve until interrupted; `on_ready` gets the line saying where."""
    import socket

    import uvicorn

    store = Path(store or default_store())

    async def main() -> None:
        gateway = await prepare(upstream_url, store, **kwargs)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        bound = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(make_app(gateway), log_level="warning", access_log=False,
                                               lifespan="off"))
        on_ready(f"gateway listening on http://{host}:{bound} (upstream {gateway.upstream.url}, "
                 f"{gateway.upstream.dialect}; store {store})")
        try:
            await server.serve(sockets=[sock])
        finally:
            await gateway.upstream.close()
    asyncio.run(main())
