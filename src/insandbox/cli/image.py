"""`insandbox image ...`: the sandbox image and the registries proxy's."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..core import defaults
from .common import fail


def image_build(
    image: Annotated[str, typer.Option(help="The image to build (its name and tag).")] = defaults.IMAGE,
    base: Annotated[Optional[str], typer.Option(
        help="Base image.", metavar="IMAGE",
        show_default="debian:bookworm-slim, or a debootstrapped Debian where no registry is reachable")] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Rebuild every layer.")] = False,
    ca_cert: Annotated[Optional[list[Path]], typer.Option(
        metavar="FILE", help="Extra CA certificate to trust in the image (repeatable; the host's "
                             "/usr/local/share/ca-certificates are always added).")] = None,
) -> None:
    """Build the sandbox image from the Dockerfile shipped with insandbox."""
    from rich.console import Console

    from ..sandbox import SandboxError
    from ..sandbox.docker.image import build_image

    console = Console(highlight=False)
    try:
        with console.status("building", spinner="dots") as status:
            info = build_image(image, base=base, no_cache=no_cache, extra_ca=ca_cert or [],
                               progress=lambda line: status.update(line[:120]))
    except SandboxError as e:
        fail(str(e), 1)
    console.print(f"built [bold]{info.tag}[/bold] on {info.base}: {info.size_bytes / 1e6:,.0f} MB ({info.id[:19]})")


def image_build_proxy(
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Rebuild every layer.")] = False,
) -> None:
    """Build the image of the allow-list proxy of --network registries (otherwise built on first use)."""
    from rich.console import Console

    from ..sandbox import SandboxError
    from ..sandbox.docker.image import image_info
    from ..sandbox.docker.proxy import allowed_endpoints, build_image

    console = Console(highlight=False)
    try:
        with console.status("building", spinner="dots") as status:
            tag = build_image(no_cache=no_cache, progress=lambda line: status.update(line[:120]))
        info = image_info(tag)
        allowed = ", ".join(map(str, allowed_endpoints()))
    except (SandboxError, ValueError) as e:
        fail(str(e), 1)
    console.print(f"built [bold]{info.tag}[/bold]: {info.size_bytes / 1e6:,.0f} MB ({info.id[:19]}); "
                  f"its proxy will let through {allowed}")


def image_status(image: Annotated[str, typer.Option(help="The image to look at.")] = defaults.IMAGE) -> None:
    """Say whether the image exists and how big it is."""
    from ..sandbox import SandboxError
    from ..sandbox.docker.image import image_exists, image_info

    try:
        if not image_exists(image):
            fail(f"{image} does not exist; build it with `insandbox image build`", 1)
        info = image_info(image)
    except SandboxError as e:  # no engine: one line, like every other command
        fail(str(e), 1)
    typer.echo(f"{info.tag}: {info.size_bytes / 1e6:,.0f} MB ({info.id[:19]})")


def image_export(
    out: Annotated[Path, typer.Option(help="Where to write: PATH.tar (one tar) or an empty or new folder.",
                                      show_default=False)],
    image: Annotated[str, typer.Option(help="The image to export.")] = defaults.IMAGE,
) -> None:
    """Write the image's files where a machine without Docker reads them (--backend bwrap, with
    INSANDBOX_ROOTFS=PATH): one tar, or a folder of root/ and image.json."""
    from ..sandbox import SandboxError, backend_class
    from ..sandbox.docker.image import image_exists

    try:
        if not image_exists(image):
            fail(f"{image} does not exist; build it with `insandbox image build`", 1)
        with _spinner(f"exporting {image} to {out}"):
            path = backend_class("docker").export_root_filesystem(image, out)
    except FileExistsError as e:
        fail(f"--out {e.args[0] if e.args else out}", 2)
    except SandboxError as e:
        fail(str(e), 1)
    except OSError as e:
        fail(f"--out {out}: {e.strerror or e}", 1)
    size = path.stat().st_size if path.is_file() else sum(f.stat().st_size for f in path.rglob("*") if f.is_file()
                                                          and not f.is_symlink())
    typer.echo(f"exported {image} to {path} ({size / 1e6:,.0f} MB); where Docker is missing: "
               f"INSANDBOX_ROOTFS={path} insandbox run --backend bwrap ...")


def _spinner(text: str):
    from rich.console import Console

    return Console(stderr=True, highlight=False).status(text, spinner="dots")
