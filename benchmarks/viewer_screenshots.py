"""Screenshots of `insandbox view` over folders recorded by real runs (real sandboxes, the scripted model):
the runs list, a run's steps, its PNG and HTML files, the benchmark, and one item's two modes side by side.

    python benchmarks/viewer_screenshots.py OUT_DIR [--image insandbox:latest]

Needs the Docker engine, the sandbox image and Chromium (scripts/setup.sh installs it); the PNGs go to
OUT_DIR (the recorded folders to OUT_DIR/runs)."""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from insandbox.viewer.index import folder_id  # noqa: E402
from tests.viewer.conftest import chromium_path, serve  # noqa: E402
from tests.viewer.recorded import record_bench, record_run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--image", default="insandbox:latest")
    args = ap.parse_args()
    root = args.out / "runs"
    shutil.rmtree(root, ignore_errors=True)
    record_run(root / "plot", args.image)
    record_bench(root / "bench-chem", args.image)
    (root / "bench-chem-rows.jsonl").unlink()
    from insandbox.bench.report import write_report

    write_report([root / "bench-chem"], None)  # report/: its figures show on the benchmark's page
    plot, bench = folder_id("plot"), folder_id("bench-chem")
    shots = [("runs_list", "/", None), ("run_view", f"/r/{plot}", None),
             ("file_png", f"/r/{plot}", "a.file:has-text('sine.png')"),
             ("file_html", f"/r/{plot}/view/files/page.html", None),
             ("file_csv", f"/r/{plot}/view/files/table.csv", None),
             ("benchmark", f"/b/{bench}", None), ("side_by_side", f"/b/{bench}/compare?item=q2&repeat=0", None)]
    from playwright.sync_api import sync_playwright

    served = serve(root)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path())
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for name, path, click in shots:
                page.goto(served.url(path))
                page.wait_for_load_state("networkidle")
                if click:
                    page.click(click)
                    page.wait_for_load_state("networkidle")
                    page.locator(".file-view").scroll_into_view_if_needed()
                page.screenshot(path=str(args.out / f"{name}.png"), full_page=name != "file_png")
                print(args.out / f"{name}.png")
            browser.close()
    finally:
        served.stop()


if __name__ == "__main__":
    main()
