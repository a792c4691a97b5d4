"""ATIF (Agent Trajectory Interchange Format, ATIF-v1.8): a run's trajectory out, and back in.

Out (`to_atif`): the conversation as ATIF steps numbered from 1: the system prompt, the task, then
one agent step per model call, with its tool calls (arguments as objects), the tool results as that
step's observation (each naming its call), its metrics (prompt, completion and cached tokens, cost,
the sampled tokens' logprobs; an RL rollout's prompt and completion token ids), and the run's totals as
final metrics. A reminder the loop sent when a reply had no tool call is a user step. What ATIF has no
field for (the exact messages, each step's timings and notes, the run's settings, exit reason, answer,
sandbox, verification) goes in the `extra` objects ATIF keeps for producers, so that `from_atif`
gives the same trajectory back and exporting it again gives the same file.

In (`from_atif`): an insandbox export comes back whole; another producer's trajectory becomes a run
folder the viewer shows: its messages rebuilt from the steps, its metrics as step figures.
"""
from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Optional

from ..core.trajectory import StepRecord, ToolCallRecord, Trajectory

SCHEMA = "ATIF-v1.8"
AGENT = "insandbox"
EXTRA = "insandbox"  # the key of our own fields in ATIF's `extra` objects


def to_atif(traj: Trajectory, version: str = "", tokens: Optional[dict] = None) -> dict:
    """The ATIF document of `traj`. `tokens`: an RL rollout record's prompt_ids, response_ids,
    response_mask and response_logprobs, split into each agent step's metrics."""
    steps: list[dict] = []
    agent_steps = iter(traj.steps)
    turn_tokens = iter(_token_turns(tokens) if tokens else [])
    messages = traj.messages
    i = 0
    while i < len(messages):
        msg = messages[i]
        role = msg.get("role")
        if role == "assistant":
            record = next(agent_steps, None)
            results = []
            covered = [msg]
            while i + 1 < len(messages) and messages[i + 1].get("role") == "tool":
                i += 1
                covered.append(messages[i])
                results.append({"source_call_id": messages[i].get("tool_call_id"), "content": _text(messages[i])})
            steps.append(_agent_step(len(steps) + 1, msg, record, results, covered, next(turn_tokens, None), traj))
        elif role in ("system", "user"):
            steps.append({"step_id": len(steps) + 1, "source": role, "message": _text(msg),
                          "extra": {EXTRA: {"messages": [msg]}}})
        else:  # a tool result with no call before it: kept as a user-visible step of its own
            steps.append({"step_id": len(steps) + 1, "source": "user", "message": _text(msg),
                          "extra": {EXTRA: {"messages": [msg]}}})
        i += 1
    if not steps:  # ATIF needs one step; a run that never reached the model has its task
        steps.append({"step_id": 1, "source": "user", "message": str(traj.task.get("prompt") or "")})
    t = traj.totals
    rest = traj.model_dump(mode="json", exclude={"messages", "steps"})
    doc = {"schema_version": SCHEMA, "session_id": traj.run_id, "trajectory_id": traj.run_id,
           "agent": {"name": AGENT, "version": version or "unknown", "model_name": traj.config.get("model"),
                     "tool_definitions": traj.tools or None},
           "steps": steps,
           "final_metrics": {"total_prompt_tokens": t.prompt_tokens, "total_completion_tokens": t.completion_tokens,
                             "total_cached_tokens": sum(s.cached_tokens or 0 for s in traj.steps) or None,
                             "total_cost_usd": t.cost_usd, "total_steps": len(steps)},
           "extra": {EXTRA: rest}}
    if tokens:
        doc["extra"]["rollout"] = {k: v for k, v in tokens.items() if k not in ("prompt_ids", "response_ids",
                                                                                  "response_mask", "response_logprobs",
                                                                                  "trajectory")}
    return _without_none(doc)


def from_atif(doc: dict) -> Trajectory:
    """The trajectory of an ATIF document: exact for insandbox's own exports, rebuilt for others'."""
    ours = ((doc.get("extra") or {}).get(EXTRA)) if isinstance(doc.get("extra"), dict) else None
    messages: list[dict] = []
    records: list[StepRecord] = []
    for step in doc.get("steps") or []:
        kept = ((step.get("extra") or {}).get(EXTRA) or {}) if isinstance(step.get("extra"), dict) else {}
        messages += kept.get("messages") or _messages_of(step)
        if step.get("source") == "agent":
            records.append(StepRecord.model_validate(kept["record"]) if kept.get("record")
                           else _record_of(step, len(records) + 1))
    if ours:
        return Trajectory.model_validate({**ours, "messages": messages, "steps": [r.model_dump() for r in records]})
    agent = doc.get("agent") or {}
    traj = Trajectory(run_id=str(doc.get("session_id") or doc.get("trajectory_id") or "atif"), messages=messages,
                      tools=agent.get("tool_definitions") or [],
                      config={"model": agent.get("model_name"), "imported_from": f"ATIF ({agent.get('name')} "
                                                                                  f"{agent.get('version')})"},
                      task={"prompt": next((_as_text(s.get("message")) for s in doc.get("steps") or []
                                            if s.get("source") == "user"), "")})
    for record in records:
        traj.add_step(record)
    return traj


# ---------------------------------------------------------------------- out
def _agent_step(step_id: int, msg: dict, record: Optional[StepRecord], results: list[dict], covered: list[dict],
                tokens: Optional[dict], traj: Trajectory) -> dict:
    step: dict[str, Any] = {"step_id": step_id, "source": "agent", "message": _text(msg)}
    if record is not None:
        step["timestamp"] = _iso(record.started_at)
        step["reasoning_content"] = record.reasoning
    calls = msg.get("tool_calls") or []
    if calls:
        step["tool_calls"] = [_call(c) for c in calls]
    elif record is not None and record.tool_calls:  # written as <tool_call> text: the record has them
        step["tool_calls"] = [{"tool_call_id": c.id, "function_name": c.name, "arguments": _arguments(c.arguments)}
                              for c in record.tool_calls]
    known = {c["tool_call_id"] for c in step.get("tool_calls") or []}
    if results:
        step["observation"] = {"results": [r if r["source_call_id"] in known else {"content": r["content"]}
                                           for r in results]}
    metrics: dict[str, Any] = {}
    if record is not None:
        metrics = {"prompt_tokens": record.prompt_tokens, "completion_tokens": record.completion_tokens,
                   "cached_tokens": record.cached_tokens, "cost_usd": record.cost_usd}
        if record.logprobs:
            metrics["logprobs"] = [float(lp.get("logprob", 0.0)) for lp in record.logprobs]
    if tokens:
        metrics.update(tokens)
    if metrics:
        step["metrics"] = metrics
    step["extra"] = {EXTRA: {"messages": covered, **({"record": record.model_dump(mode="json")} if record else {})}}
    return step


def _call(call: dict) -> dict:
    fn = call.get("function") or {}
    return {"tool_call_id": str(call.get("id") or ""), "function_name": str(fn.get("name") or ""),
            "arguments": _arguments(fn.get("arguments"))}


def _arguments(raw: Any) -> dict:
    """ATIF wants an object: JSON text that is one is parsed; anything else is kept as {"raw": text}."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"raw": raw if isinstance(raw, str) else json.dumps(raw)}


def _token_turns(rec: dict) -> list[dict]:
    """Each model turn's token ids and logprobs from an RL record's flat response and mask."""
    prompt, ids, mask = rec.get("prompt_ids") or [], rec.get("response_ids") or [], rec.get("response_mask") or []
    lps = rec.get("response_logprobs") or [None] * len(ids)
    turns, start = [], None
    for k in range(len(ids) + 1):
        inside = k < len(ids) and mask[k] == 1
        if inside and start is None:
            start = k
        elif not inside and start is not None:
            turn = {"prompt_token_ids": prompt + ids[:start], "completion_token_ids": ids[start:k]}
            if all(lp is not None for lp in lps[start:k]):
                turn["logprobs"] = [float(lp) for lp in lps[start:k]]
            turns.append(turn)
            start = None
    return turns


def _text(msg: dict) -> str:
    return _as_text(msg.get("content"))


def _as_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: their text
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return json.dumps(content, ensure_ascii=False)


def _iso(ts: float) -> Optional[str]:
    try:
        return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return None


def _without_none(value: Any) -> Any:
    """None-valued keys dropped (ATIF's optional fields are absent rather than null), lists kept whole."""
    if isinstance(value, dict):
        return {k: (v if k == EXTRA else _without_none(v)) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


# ---------------------------------------------------------------------- in (another producer's)
def _messages_of(step: dict) -> list[dict]:
    source, text = step.get("source"), _as_text(step.get("message"))
    if source in ("system", "user"):
        return [{"role": source, "content": text}]
    calls = step.get("tool_calls") or []
    msg: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        msg["tool_calls"] = [{"id": c.get("tool_call_id"), "type": "function",
                              "function": {"name": c.get("function_name"),
                                           "arguments": json.dumps(c.get("arguments") or {}, ensure_ascii=False)}}
                             for c in calls]
    out = [msg]
    for r in (step.get("observation") or {}).get("results") or []:
        out.append({"role": "tool", "tool_call_id": r.get("source_call_id"), "content": _as_text(r.get("content"))})
    return out


def _record_of(step: dict, index: int) -> StepRecord:
    m = step.get("metrics") or {}
    results = {r.get("source_call_id"): _as_text(r.get("content"))
               for r in (step.get("observation") or {}).get("results") or []}
    started = 0.0
    if step.get("timestamp"):
        try:
            started = _dt.datetime.fromisoformat(str(step["timestamp"]).replace("Z", "+00:00")).timestamp()
        except ValueError:
            started = 0.0
    calls = [ToolCallRecord(id=str(c.get("tool_call_id") or ""), name=str(c.get("function_name") or ""),
                            arguments=json.dumps(c.get("arguments") or {}, ensure_ascii=False),
                            output=results.get(c.get("tool_call_id"), "")) for c in step.get("tool_calls") or []]
    return StepRecord(index=index, started_at=started, prompt_tokens=int(m.get("prompt_tokens") or 0),
                      completion_tokens=int(m.get("completion_tokens") or 0), cached_tokens=m.get("cached_tokens"),
                      cost_usd=m.get("cost_usd"), usage_reported="prompt_tokens" in m,
                      logprobs=[{"token": "", "logprob": lp} for lp in m["logprobs"]] if m.get("logprobs") else None,
                      content=_as_text(step.get("message")) or None, reasoning=step.get("reasoning_content"),
                      tool_calls=calls)
