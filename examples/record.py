"""Re-record the case studies' `recorded/` run folders from their scripts.

Each example folder holds `scripted.yaml`: the tool calls a scripted "model" makes, played over real
HTTP by `insandbox.models.scripted_server.ScriptedServer`. This runs the real `insandbox run` command
against it, in the real Docker sandbox, so every file under `recorded/files/` was made by the code
the script runs inside the sandbox.

    python examples/record.py                  # every example
    python examples/record.py poster music     # some of them
    python examples/record.py music --out /tmp/rec   # into /tmp/rec/music instead of examples/music/recorded

Run it from the repository root: the recorded trajectories then name the inputs by relative paths
(`examples/<name>/inputs`), so a re-recording differs from the last one only in what really varies
(timings, container names, ids).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent
REPO = EXAMPLES.parent


def example_names() -> list[str]:
    """The case studies: the folders next to this file that hold a scripted.yaml."""
    return sorted(p.parent.name for p in EXAMPLES.glob("*/scripted.yaml"))


def run_command(name: str, base_url: str, out: Path) -> list[str]:
    """The `insandbox run` call that records example `name` (a real model's command differs only in
    --model/--base-url and --out)."""
    folder = Path("examples") / name
    cmd = [sys.executable, "-m", "insandbox", "run", "--query-file", str(folder / "task.md"),
           "--input-dir", str(folder / "inputs"), "--model", f"scripted-{name}", "--base-url", base_url,
           "--out", str(out), "--max-steps", "20", "--quiet"]
    if (REPO / folder / "prompts.yaml").is_file():  # an example whose files go elsewhere than /testbed/input
        cmd += ["--prompt-config", str(folder / "prompts.yaml")]
    return cmd


def record(name: str, out: Path | None = None) -> Path:
    """Record example `name` into `out` (default: its recorded/ folder, replaced) and return the run folder."""
    from insandbox.models.scripted_server import ScriptedServer

    target = out if out is not None else EXAMPLES / name / "recorded"
    # the last recording steps aside until the new one has succeeded (the run folder's path is recorded
    # in the trajectory, so the new run must be written under its final name)
    previous = target.with_name(target.name + ".previous")
    if previous.exists():
        shutil.rmtree(previous)
    if target.exists():
        target.rename(previous)
    try:
        with ScriptedServer(EXAMPLES / name / "scripted.yaml") as server:
            # relative paths in the trajectory: run from the repository root, write the run folder as given
            dest = target if out is not None else Path("examples") / name / "recorded"
            r = subprocess.run(run_command(name, server.url, dest), cwd=REPO, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{name}: insandbox run exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    except BaseException:
        if previous.exists():
            shutil.rmtree(target, ignore_errors=True)
            previous.rename(target)
        raise
    if previous.exists():
        shutil.rmtree(previous)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="examples to record (default: all)")
    parser.add_argument("--out", type=Path, help="write <out>/<name> instead of examples/<name>/recorded")
    args = parser.parse_args(argv)
    known = example_names()
    names = args.names or known
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"record.py: no such example: {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    for name in names:
        try:
            run_dir = record(name, args.out.resolve() / name if args.out else None)
        except RuntimeError as e:  # the run failed; its last recording is back in place
            print(f"record.py: {e}", file=sys.stderr)
            return 1
        files = sorted(p.relative_to(run_dir).as_posix() for p in (run_dir / "files").rglob("*") if p.is_file())
        print(f"{name}: {run_dir} ({', '.join(files)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
