"""The viewer's pages and the fragments htmx fetches into them.

Every handler is a plain function: Starlette runs it in a thread, so reading the disk never blocks
the event loop that streams live updates. A request made by htmx (header HX-Request) gets only the
fragment it swaps in; the same URL opened directly gets the whole page, so every view has a link.
"""
from __future__ import annotations

import math
import mimetypes
import os
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlencode

from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import Route

from ..bench import degraded
from ..bench.stats import accuracy
from . import files as F
from . import training as T
from .guard import RAW_CSP
from .index import BenchEntry, RunEntry
from .live import stream
from .midi import MidiError, read_notes
from .trajectories import tool_arguments, trajectory_of

STEPS_PAGE = 50
ROWS_PAGE = 100
ITEMS_PAGE = 200
LONG_OUTPUT = 2000  # characters of an observation shown before it is collapsed


class AnyPath(Convertor):
    """The rest of the path, newlines included (Starlette's `path` stops at one); the handlers read the
    names again from the raw path, where they are still percent-encoded."""
    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("anypath", AnyPath())


# ---------------------------------------------------------------------- helpers
def _viewer(request: Request):
    return request.app.state.viewer


def _page(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    v = _viewer(request)
    html = v.templates.get_template(template).render(request=request, root=v.index.root, **context)
    # a lone surrogate (a hand-made trajectory.json can hold one) shows as "?" instead of failing the page
    return Response(html.encode("utf-8", errors="replace"), status_code=status_code,
                    media_type="text/html; charset=utf-8")  # the security headers: guard.Guard


def _htmx(request: Request) -> bool:
    return request.headers.get("HX-Request") == "true" and request.headers.get("HX-History-Restore-Request") != "true"


def _int(value: Optional[str], default: int = 0, low: int = 0) -> int:
    try:
        return max(int(value), low) if value not in (None, "") else default
    except ValueError:
        return default


def _lookup(request: Request, table: str, key: str, what: str):
    """The index entry the URL names; a folder made a moment ago gets a fresh scan before a 404."""
    index, wanted = _viewer(request).index, request.path_params[key]
    entry = getattr(index.scan(), table).get(wanted) or getattr(index.scan(force=True), table).get(wanted)
    if entry is None:
        raise HTTPException(404, f"no such {what} under the viewer's folder")
    return entry


def _run(request: Request) -> RunEntry:
    return _lookup(request, "by_rid", "rid", "run")


def _bench(request: Request) -> BenchEntry:
    return _lookup(request, "by_bid", "bid", "benchmark")


def _tail(request: Request, skip: int, missing: str) -> str:
    """The file path a URL names after its first `skip` names (as in /r/{rid}/raw/...), each name decoded
    once from the raw path so that any byte of a file name comes through."""
    raw = request.scope.get("raw_path")
    try:
        names = F.names_of_url(raw) if raw is not None else request.scope["path"].split("/")[1:]
    except F.BadPath:
        raise HTTPException(404, missing) from None
    return "/".join(names[skip:])


def _inside(base: os.PathLike, rel: str, is_kind, missing: str) -> Path:
    """base/rel, strictly inside base (files.resolve_inside) and of the kind asked for, else a 404."""
    try:
        path = F.resolve_inside(base, rel)
    except F.NotInside:
        raise HTTPException(404, missing) from None
    if not is_kind(path):
        raise HTTPException(404, missing)
    return path


# ---------------------------------------------------------------------- the runs list
SORTS = {"started": lambda r: r.started or 0.0, "item": lambda r: (r.task, r.item, r.repeat or 0),
         "mode": lambda r: r.mode, "score": lambda r: -1.0 if r.score is None else r.score,
         "exit": lambda r: r.exit_reason or "", "model": lambda r: r.model or "", "steps": lambda r: r.steps,
         "tokens": lambda r: r.tokens, "time": lambda r: r.wall_s or 0.0,
         "cost": lambda r: -1.0 if r.cost is None else r.cost}
FILTERS = ("task", "mode", "score", "exit", "model", "q", "sort", "desc")


def _score_matches(score: Optional[float], wanted: str) -> bool:
    if wanted == "correct":
        return score is not None and score >= 1.0
    if wanted == "wrong":
        return score is not None and score <= 0.0
    if wanted == "partial":
        return score is not None and 0.0 < score < 1.0
    if wanted == "none":
        return score is None
    return True


def select_runs(runs: list[RunEntry], params: dict[str, str]) -> list[RunEntry]:
    """The runs the list's filters keep, in the order asked for (newest first by default)."""
    out = runs
    for key, attr in (("task", "task"), ("mode", "mode"), ("exit", "exit_reason"), ("model", "model")):
        wanted = params.get(key)
        if wanted:
            out = [r for r in out if str(getattr(r, attr) or "none") == wanted]
    if params.get("score"):
        out = [r for r in out if _score_matches(r.score, params["score"])]
    needle = (params.get("q") or "").strip().lower()
    if needle:
        out = [r for r in out if needle in f"{r.task} {r.item} {r.rel} {r.model} {r.exit_reason} {r.error}".lower()]
    sort = params.get("sort") or "started"
    desc = params.get("desc", "1" if sort == "started" else "") == "1"
    return sorted(out, key=SORTS.get(sort, SORTS["started"]), reverse=desc)


def runs_list(request: Request) -> Response:
    v = _viewer(request)
    index = v.index.scan()
    if not request.query_params and len(index.runs) + len(index.benches) + len(index.trainings) == 1:
        if index.runs:  # the folder is one run
            return RedirectResponse(f"/r/{index.runs[0].rid}", status_code=303)
        if index.trainings:  # the folder is one training
            return RedirectResponse(f"/train/{index.trainings[0].tid}", status_code=303)
    params = {k: request.query_params.get(k, "") for k in FILTERS}
    page = _int(request.query_params.get("page"))
    chosen = select_runs(index.runs, params)
    rows = chosen[page * ROWS_PAGE:(page + 1) * ROWS_PAGE]
    more = (page + 1) * ROWS_PAGE < len(chosen)
    query = {k: val for k, val in params.items() if val}
    context = dict(rows=rows, total=len(chosen), all_runs=len(index.runs), params=params, page=page, more=more,
                   next_url="/rows?" + urlencode({**query, "page": page + 1}), query=query,
                   sort_url=lambda col: "/?" + urlencode({**query, "sort": col,
                                                          "desc": "" if params["sort"] == col and params["desc"] == "1"
                                                          else "1"}))
    if _htmx(request) and request.url.path == "/rows":
        return _page(request, "_runs_rows.html", **context)
    if _htmx(request):
        return _page(request, "_runs_table.html", **context)
    choices = {
        "task": sorted({r.task for r in index.runs}), "mode": sorted({r.mode for r in index.runs}),
        "exit": sorted({str(r.exit_reason or "none") for r in index.runs}),
        "model": sorted({str(r.model or "none") for r in index.runs}),
    }
    return _page(request, "runs.html", benches=index.benches, trainings=index.trainings, choices=choices, **context)


def benches_table(request: Request) -> Response:
    """The benchmarks above the runs list, refreshed while any of them runs."""
    return _page(request, "_benches.html", benches=_viewer(request).index.scan().benches)


# ---------------------------------------------------------------------- one run
def _step_view(step, cumulative: int) -> dict:
    calls = []
    for c in step.tool_calls:
        args = tool_arguments(c.arguments)
        calls.append({"call": c, "args": args, "shown": len(c.output), "long": len(c.output) > LONG_OUTPUT,
                      "head": c.output[:LONG_OUTPUT]})
    return {"step": step, "calls": calls, "cumulative": cumulative}


def step_views(traj, start: int, count: int) -> list[dict]:
    """Steps start..start+count (0-based) ready for the template, with the tokens billed up to each."""
    billed = sum(s.prompt_tokens + s.completion_tokens for s in traj.steps[:start])
    out = []
    for step in traj.steps[start:start + count]:
        billed += step.prompt_tokens + step.completion_tokens
        out.append(_step_view(step, billed))
    return out


def prompt_messages(traj) -> tuple[Optional[str], Optional[str]]:
    """The system prompt and the first user message, as text."""
    system = user = None
    for m in traj.messages:
        content = m.get("content")
        if isinstance(content, list):  # content parts
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        if m.get("role") == "system" and system is None:
            system = content
        elif m.get("role") == "user" and user is None:
            user = content
            break
    return system, user


def _head_context(request: Request, entry: RunEntry) -> dict:
    v = _viewer(request)
    return dict(entry=entry, traj=v.trajectories.get(entry.path / "trajectory.json"),
                bench=v.index.by_bid.get(entry.bench) if entry.bench else None)


def _run_context(request: Request, entry: RunEntry) -> dict:
    context = _head_context(request, entry)
    return dict(context, **_traj_context(context["traj"]), has_files=(entry.path / "files").is_dir(),
                answer_file=(entry.path / "answer.txt").is_file())


def _traj_context(traj) -> dict:
    system, user = prompt_messages(traj)
    return dict(system=system, user=user, steps=step_views(traj, 0, STEPS_PAGE),
                next_start=min(STEPS_PAGE, len(traj.steps)), steps_page=STEPS_PAGE)


def run_page(request: Request) -> Response:
    entry = _run(request)
    return _page(request, "run.html", **_run_context(request, entry))


def run_head(request: Request) -> Response:
    """The run's header alone (a live page refreshes it at every change: no step views to build)."""
    return _page(request, "_run_head.html", **_head_context(request, _run(request)))


def run_steps(request: Request) -> Response:
    """The steps from `start` on (a page of them), then what loads the next page or, at the end, the live tail."""
    entry = _run(request)
    traj = _viewer(request).trajectories.get(entry.path / "trajectory.json")
    start = _int(request.query_params.get("start"))
    count = min(_int(request.query_params.get("n"), STEPS_PAGE, low=1), 500)
    steps = step_views(traj, start, count)
    return _page(request, "_steps.html", entry=entry, traj=traj, steps=steps, next_start=start + len(steps),
                 steps_page=count)


def run_files(request: Request) -> Response:
    """A page of one folder of the run (files/ by default), filtered by name."""
    entry = _run(request)
    folder_rel = (F.query_value(request.scope.get("query_string", b""), "dir") or "files").strip("/")
    folder = _inside(entry.path, folder_rel, Path.is_dir, "no such folder in this run")
    page, needle = _int(request.query_params.get("page")), request.query_params.get("q", "")
    entries, total = _viewer(request).listings.page(folder, page, needle)
    crumbs, acc = [], []
    for part in folder_rel.split("/"):
        acc.append(part)
        crumbs.append((part, "/".join(acc)))
    return _page(request, "_files.html", entry=entry, folder=folder_rel, entries=entries, total=total, page=page,
                 q=needle, pages=max(math.ceil(total / F.PAGE), 1), crumbs=crumbs)


def _file(request: Request) -> tuple[RunEntry, str, os.PathLike]:
    entry = _run(request)
    rel = _tail(request, 3, "no such file in this run")  # /r/{rid}/view|raw/...
    return entry, rel, _inside(entry.path, rel, Path.is_file, "no such file in this run")


def file_view(request: Request) -> Response:
    """A produced file shown for what it is, with a download link."""
    entry, rel, path = _file(request)
    kind = F.kind_of(path.name)
    context: dict[str, Any] = dict(entry=entry, rel=rel, name=path.name, kind=kind, size=path.stat().st_size,
                                   raw=f"/r/{entry.rid}/raw/{F.url_path(rel)}")
    if kind == "table":
        context["rows"], context["more_rows"] = F.read_table(path)
    elif kind == "text":
        text, clipped = F.read_text(path)
        if text is None:
            context["kind"] = "binary"
        else:
            context.update(text=text, clipped=clipped, language=F.language_of(path.name), limit=F.TEXT_LIMIT)
    elif kind == "midi":
        try:
            context["division"], context["notes"], context["more_notes"] = read_notes(path.read_bytes())
        except (MidiError, IndexError, ValueError) as e:
            context["midi_error"] = str(e) or "unreadable"
    template = "_file.html" if _htmx(request) else "file.html"
    return _page(request, template, **context)


def file_raw(request: Request) -> Response:
    entry, rel, path = _file(request)
    media = mimetypes.guess_type(path.name)[0]
    if media is None:
        media = "text/plain; charset=utf-8" if F.kind_of(path.name) == "text" else "application/octet-stream"
    elif media.startswith("text/") and "charset" not in media:
        media += "; charset=utf-8"
    headers = {"Content-Security-Policy": RAW_CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
    if request.query_params.get("download"):
        return FileResponse(path, media_type=media, filename=F.shown(path.name), headers=headers)
    return FileResponse(path, media_type=media, headers=headers, content_disposition_type="inline")


def run_events(request: Request) -> Response:
    entry = _run(request)
    path = entry.path / "trajectory.json"

    def probe():
        try:
            st = os.stat(path)
        except OSError:
            return None, False
        if st.st_size < 65536:
            done = '"exit_reason": null' not in path.read_text(encoding="utf-8", errors="replace")
        else:
            with open(path, "rb") as f:  # the exit reason is near the end
                f.seek(max(st.st_size - 65536, 0))
                done = b'"exit_reason": null' not in f.read()
        return (st.st_mtime_ns, st.st_size), done

    return stream(request, probe)


# ---------------------------------------------------------------------- benchmarks
def _items(bench: BenchEntry) -> list[dict]:
    """One row per item and repeat: the sample of each mode (a RunEntry, or None when it has not run)."""
    rows: dict[tuple[str, int], dict] = {}
    order = {rid: i for i, rid in enumerate(bench.meta.get("row_ids") or [])}
    for s in bench.samples:
        row = rows.setdefault((s.item, s.repeat or 0), {"item": s.item, "repeat": s.repeat or 0, "modes": {}})
        row["modes"][s.mode] = s
    return sorted(rows.values(), key=lambda r: (order.get(r["item"], len(order)), r["item"], r["repeat"]))


def _tally(bench: BenchEntry) -> dict[str, dict]:
    """Per mode, from the records as they are now (for a run still going): the benchmark's own accuracy
    summary (bench/stats.py), with every sample counted, errors and unscored ones included; in sandbox mode
    the samples that made no tool call (bench/degraded.py)."""
    by_mode: dict[str, list[dict]] = {}
    for r in bench.records:
        by_mode.setdefault(r.get("mode", "?"), []).append(r)
    out = {}
    for mode, recs in by_mode.items():
        acc = accuracy(recs)
        out[mode] = {"samples": len(recs), "mean": acc["accuracy"], "errors": acc["errors"]}
        if mode == "sandbox":
            out[mode].update(degraded.no_tool_call(recs))
    return out


def _bench_context(request: Request, bench: BenchEntry) -> dict:
    report = bench.path / "report"
    figures = sorted(p.name for p in report.glob("*.png")) if report.is_dir() else []
    expected = len(bench.meta.get("row_ids") or []) * len(bench.meta.get("modes") or []) * \
        int(bench.meta.get("repeats") or 1)
    tally = _tally(bench)
    # from the records as they are now, so a running benchmark warns as soon as most samples made no call
    tool_format = (bench.meta.get("config", {}).get("run") or {}).get("tool_format")
    warnings = degraded.warnings({bench.task: {"sandbox": tally.get("sandbox", {})}}, tool_format)
    return dict(bench=bench, figures=figures, report_html=(report / "report.html").is_file(),
                report_md=(report / "report.md").is_file(), tally=tally, expected=expected, warnings=warnings,
                most=degraded.is_most)


def bench_page(request: Request) -> Response:
    bench = _bench(request)
    return _page(request, "bench.html", **_bench_context(request, bench), **_items_context(request, bench))


def bench_summary(request: Request) -> Response:
    bench = _bench(request)
    return _page(request, "_bench_summary.html", **_bench_context(request, bench))


def _items_context(request: Request, bench: BenchEntry) -> dict:
    rows = _items(bench)
    needle = (request.query_params.get("q") or "").strip().lower()
    if needle:
        rows = [r for r in rows if needle in r["item"].lower()]
    if request.query_params.get("differ"):
        rows = [r for r in rows if len({getattr(m, "score", None) for m in r["modes"].values()}) > 1]
    page = _int(request.query_params.get("page"))
    modes = [m for m in ("sandbox", "llm") if m in (bench.meta.get("modes") or ["sandbox", "llm"])]
    modes += sorted({s.mode for s in bench.samples} - set(modes))
    return dict(items=rows[page * ITEMS_PAGE:(page + 1) * ITEMS_PAGE], items_total=len(rows), items_page=page,
                items_pages=max(math.ceil(len(rows) / ITEMS_PAGE), 1), modes=modes, q=needle,
                differ=bool(request.query_params.get("differ")))


def bench_items(request: Request) -> Response:
    bench = _bench(request)
    return _page(request, "_bench_items.html", bench=bench, **_items_context(request, bench))


def bench_compare(request: Request) -> Response:
    """An item's samples of each mode side by side, each as its step view."""
    bench = _bench(request)
    item, repeat = request.query_params.get("item", ""), _int(request.query_params.get("repeat"))
    row = next((r for r in _items(bench) if r["item"] == item and r["repeat"] == repeat), None)
    if row is None:
        raise HTTPException(404, "no such item in this benchmark")
    columns = []
    for mode in ("sandbox", "llm", *sorted(set(row["modes"]) - {"sandbox", "llm"})):
        entry = row["modes"].get(mode)
        columns.append({"mode": mode, "entry": entry, **(_run_context(request, entry) if entry else {})})
    return _page(request, "compare.html", bench=bench, item=item, repeat=repeat, columns=columns)


def bench_report_file(request: Request) -> Response:
    bench = _bench(request)
    path = _inside(bench.path / "report", _tail(request, 3, "no such report file"), Path.is_file,
                   "no such report file")
    media = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if path.suffix in (".md", ".json"):
        media = "text/plain; charset=utf-8"
    return FileResponse(path, media_type=media, content_disposition_type="inline",
                        headers={"Content-Security-Policy": RAW_CSP, "X-Content-Type-Options": "nosniff"})


def bench_events(request: Request) -> Response:
    bench = _bench(request)

    def probe():
        stamps = []
        for name in ("results.jsonl", "summary.json"):
            try:
                st = os.stat(bench.path / name)
                stamps.append((st.st_mtime_ns, st.st_size))
            except OSError:
                stamps.append(None)
        samples = bench.path / "samples"
        try:  # a sample starting: its mode's folder gains an item folder
            stamps += [os.stat(samples / m).st_mtime_ns for m in sorted(os.listdir(samples))]
        except OSError:
            pass
        return tuple(stamps), False

    return stream(request, probe)


# ---------------------------------------------------------------------- trainings
def _training(request: Request) -> T.TrainEntry:
    return _lookup(request, "by_tid", "tid", "training")


def train_page(request: Request) -> Response:
    """A training's charts per step and its steps, each linking to the rollouts it kept."""
    t = _training(request)
    metrics = T.read_metrics(t.path)
    files = T.step_files(t.path)
    s = T.series(metrics.rows)
    charts = T.charts(s, lambda step: f"/train/{t.tid}/step/{step}" if step in files else None)
    by_step = {int(r["step"]): r for r in metrics.rows}
    rows = []
    for step in sorted(set(by_step) | set(files)):
        row = by_step.get(step) or {}
        exits = row.get("exit_reasons")
        rows.append({"step": step, "row": row, "rollouts": step in files,
                     "exits": sorted(exits.items(), key=lambda kv: str(kv[0])) if isinstance(exits, dict) else [],
                     **{k: T.number(row.get(k)) for k in ("reward_mean", "reward_std", "loss", "rollouts",
                                                           "rollouts_per_min")}})
    return _page(request, "training.html", training=t, charts=charts, metrics=metrics, steps=rows,
                 config=T.read_yaml_config(t.path), summary=T.read_summary_json(t.path))


def _step_files(request: Request, t: T.TrainEntry) -> list[str]:
    names = T.step_files(t.path).get(request.path_params["step"])
    if not names:
        raise HTTPException(404, "no rollouts of this step in the training's folder")
    return names


def train_step(request: Request) -> Response:
    """The rollouts a step kept, each linking to its trajectory."""
    t = _training(request)
    step = request.path_params["step"]
    files = _step_files(request, t)
    kept = _viewer(request).rollouts.step(t.path, files)
    return _page(request, "training_step.html", training=t, step=step, kept=kept, files=files)


def _rollout(request: Request) -> tuple[T.TrainEntry, int, int, RunEntry, Any]:
    """The rollout a URL names (its place in the step) as a run entry and its trajectory."""
    t = _training(request)
    step, k = request.path_params["step"], request.path_params["k"]
    fields, data = _viewer(request).rollouts.trajectory(t.path, _step_files(request, t), k)
    if fields is None:
        raise HTTPException(404, "no such rollout in this step")
    traj = trajectory_of(data, f"{t.rel}: step {step}, rollout {k}")
    reward = T.number(fields.get("reward"))
    entry = RunEntry(rid=f"t{t.tid}-{step}-{k}", path=t.path, rel=f"{t.rel} · step {step} · rollout {k}",
                     task=f"step {step}", item=str(fields.get("id") or k), mode=traj.mode, score=reward,
                     exit_reason=traj.exit_reason, model=traj.config.get("model"), steps=traj.totals.steps,
                     tokens=traj.totals.total_tokens, wall_s=traj.totals.wall_time_s)
    return t, step, k, entry, traj


def rollout_page(request: Request) -> Response:
    """A rollout's trajectory in the run view."""
    t, step, k, entry, traj = _rollout(request)
    return _page(request, "run.html", entry=entry, traj=traj, bench=None, training=t, step=step,
                 steps_url=f"/train/{t.tid}/step/{step}/{k}/steps", has_files=False, answer_file=False,
                 **_traj_context(traj))


def rollout_steps(request: Request) -> Response:
    t, step, k, entry, traj = _rollout(request)
    start = _int(request.query_params.get("start"))
    count = min(_int(request.query_params.get("n"), STEPS_PAGE, low=1), 500)
    steps = step_views(traj, start, count)
    return _page(request, "_steps.html", entry=entry, traj=traj, steps=steps, next_start=start + len(steps),
                 steps_page=count, steps_url=f"/train/{t.tid}/step/{step}/{k}/steps")


def train_events(request: Request) -> Response:
    t = _training(request)

    def probe():
        stamps = [T.stamp_of(t.path, T.METRICS), T.stamp_of(t.path, T.ROLLOUTS)]
        return tuple(stamps), T.stamp_of(t.path, T.SUMMARY) is not None

    return stream(request, probe)


def list_events(request: Request) -> Response:
    index = _viewer(request).index
    return stream(request, lambda: (index.scan().version, False))


def no_icon(request: Request) -> Response:
    return Response(status_code=204)


def routes() -> list[Route]:
    return [
        Route("/", runs_list), Route("/favicon.ico", no_icon), Route("/rows", runs_list), Route("/events", list_events),
        Route("/benches", benches_table),
        Route("/r/{rid}", run_page), Route("/r/{rid}/head", run_head), Route("/r/{rid}/steps", run_steps),
        Route("/r/{rid}/files", run_files), Route("/r/{rid}/view/{path:anypath}", file_view),
        Route("/r/{rid}/raw/{path:anypath}", file_raw), Route("/r/{rid}/events", run_events),
        Route("/b/{bid}", bench_page), Route("/b/{bid}/summary", bench_summary), Route("/b/{bid}/items", bench_items),
        Route("/b/{bid}/compare", bench_compare), Route("/b/{bid}/report/{path:anypath}", bench_report_file),
        Route("/b/{bid}/events", bench_events),
        Route("/train/{tid}", train_page), Route("/train/{tid}/events", train_events),
        Route("/train/{tid}/step/{step:int}", train_step), Route("/train/{tid}/step/{step:int}/{k:int}", rollout_page),
        Route("/train/{tid}/step/{step:int}/{k:int}/steps", rollout_steps),
    ]
