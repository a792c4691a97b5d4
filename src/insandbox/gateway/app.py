"""The gateway's HTTP API (Starlette, served by uvicorn).

    POST /sessions/SID/v1/chat/completions   OpenAI's chat completions (streamed or not, tools): the
                                             turn sampled in token ids upstream and recorded
    GET  /sessions/SID/v1/models             the upstream's model
    GET  /sessions/SID/records               {"session", "records": [RolloutRecord, ...], "problems"}
    GET  /sessions                           the sessions of the store, with their chains and turns
    GET  /status                             the policy version, paused or not, requests in flight
    POST /admin/pause                        new requests wait, those in flight finish; answers once drained
    POST /admin/resume                       {"policy_version": N} (optional): requests go on, sampled as N

The admin routes need `Authorization: Bearer TOKEN`, the token the gateway wrote to STORE/admin.token
(mode 0600) when it started.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from typing import Any, Optional

from ..rl.rollout.types import SamplingParams
from .messages import BadRequest
from .sessions import Forbidden, Session, Sessions, key_hash
from .upstream import Upstream, UpstreamFailed

MAX_BODY = 64 << 20


class Gate:
    """Pause and drain: while paused new requests wait; in-flight ones are counted until they finish."""

    def __init__(self, version: int = 0):
        self.version = version
        self.open = asyncio.Event()
        self.open.set()
        self.in_flight = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.served = 0

    async def enter(self) -> int:
        """Wait while paused; the version this request samples with."""
        while not self.open.is_set():
            await self.open.wait()
        self.in_flight += 1
        self.idle.clear()
        return self.version

    def leave(self) -> None:
        self.in_flight -= 1
        self.served += 1
        if self.in_flight == 0:
            self.idle.set()

    async def pause(self) -> None:
        self.open.clear()
        await self.idle.wait()

    def resume(self, version: Optional[int] = None) -> None:
        if version is not None:
            self.version = version
        self.open.set()


class Gateway:
    def __init__(self, upstream: Upstream, sessions: Sessions, admin_token: str, version: int = 0,
                 max_tokens: int = 1024):
        self.upstream = upstream
        self.sessions = sessions
        self.admin_token = admin_token
        self.gate = Gate(version)
        self.max_tokens = max_tokens
        self.started = time.time()

    async def complete(self, sid: str, body: dict, authorization: Optional[str]) -> dict:
        """One turn: planned on its chain, sampled upstream, recorded, answered as a chat completion."""
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        if int(body.get("n") or 1) != 1:
            raise BadRequest("n: only 1 (each sample is a turn of its own chain)")
        if body.get("stop"):
            raise BadRequest("stop strings are not supported: a turn ends on its end-of-turn token, so its ids "
                             "stay the ones sampled")
        tools = body.get("tools") or None
        if body.get("tool_choice") == "none":
            tools = None
        session = self.sessions.get(sid)
        session.active += 1  # kept in memory until its turn is recorded
        try:
            return await self._turn(session, body, tools, key_hash(authorization))
        finally:
            session.active -= 1

    async def _turn(self, session: Session, body: dict, tools: Optional[list[dict]], owner: str) -> dict:
        async with session.lock:
            session.authorize(owner)
            plan = session.plan(body.get("messages"), tools)
        chat = session.formats.get(tools)
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or self.max_tokens
        try:
            params = SamplingParams(max_tokens=int(max_tokens), temperature=float(body.get("temperature", 1.0)),
                                    top_p=float(body.get("top_p", 1.0)), stop_token_ids=list(chat.stop_token_ids),
                                    seed=None if body.get("seed") is None else int(body["seed"]))
        except (TypeError, ValueError) as e:
            raise BadRequest(f"a sampling setting is not a number: {e}") from None
        if params.max_tokens < 1:
            raise BadRequest("max_tokens: at least 1")
        # what the harness left unset is the upstream's to choose (vLLM samples at 1.0, the embedded model greedily)
        unset = frozenset(k for k in ("temperature", "top_p") if body.get(k) is None)
        version = await self.gate.enter()
        try:
            t0 = time.perf_counter()
            sampled = await self.upstream.generate(plan.context, params, unset)
            took = time.perf_counter() - t0
            if sampled.logprobs is None or len(sampled.logprobs) != len(sampled.token_ids):
                raise UpstreamFailed("the upstream answered without a log-probability for every token")
            async with session.lock:
                turn = session.commit(plan, sampled, version, took, owner)
        finally:
            self.gate.leave()
        finish = "tool_calls" if turn.reply.get("tool_calls") else ("stop" if turn.stopped else "length")
        return {"id": "chatcmpl-" + uuid.uuid4().hex[:16], "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model") or self.upstream.model or "upstream",
                "choices": [{"index": 0, "message": turn.reply, "finish_reason": finish}],
                "usage": {"prompt_tokens": len(plan.context), "completion_tokens": len(turn.sampled_ids),
                          "total_tokens": len(plan.context) + len(turn.sampled_ids)},
                "policy_version": version}

    def status(self) -> dict:
        return {"policy_version": self.gate.version, "paused": not self.gate.open.is_set(),
                "in_flight": self.gate.in_flight, "served": self.gate.served, "upstream": self.upstream.url,
                "dialect": self.upstream.dialect, "model": self.upstream.model,
                "sessions": len(self.sessions.ids()), "uptime_s": round(time.time() - self.started, 1)}


def _chunks(reply: dict) -> list[dict]:
    """A completion as the pieces of a stream (one delta for the text, one per call, the finish)."""
    choice = reply["choices"][0]
    message = choice["message"]
    base = {"id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"], "model": reply["model"]}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    if message.get("content"):
        chunks.append({**base, "choices": [{"index": 0, "delta": {"content": message["content"]},
                                            "finish_reason": None}]})
    for i, call in enumerate(message.get("tool_calls") or []):
        chunks.append({**base, "choices": [{"index": 0, "delta": {"tool_calls": [{**call, "index": i}]},
                                            "finish_reason": None}]})
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
                   "usage": reply["usage"]})
    return chunks


def make_app(gateway: Gateway):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    def error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status)

    async def read_json(request: Request) -> Any:
        raw = await request.body()
        if len(raw) > MAX_BODY:
            raise BadRequest(f"the body is over {MAX_BODY >> 20} MiB")
        try:
            return json.loads(raw)
        except ValueError as e:
            raise BadRequest(f"bad JSON: {e}") from None

    async def chat(request: Request):
        sid = request.path_params["sid"]
        try:
            body = await read_json(request)
            reply = await gateway.complete(sid, body, request.headers.get("authorization"))
        except BadRequest as e:
            return error(400, str(e))
        except Forbidden as e:
            return error(403, str(e), "permission_error")
        except UpstreamFailed as e:
            return error(e.status, f"upstream: {e}", "upstream_error")
        except Exception as e:  # the upstream unreachable, a bug: said, and the gateway keeps serving
            return error(502, f"upstream: {type(e).__name__}: {e}", "upstream_error")
        if not body.get("stream"):
            return JSONResponse(reply)

        async def events():
            for chunk in _chunks(reply):
                yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    async def models(request: Request):
        name = gateway.upstream.model or "upstream"
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model", "owned_by": "insandbox"}]})

    async def records(request: Request):
        sid = request.path_params["sid"]
        try:
            if not gateway.sessions.exists(sid):
                return error(404, f"no session {sid!r}", "not_found")
            session = gateway.sessions.get(sid)
        except BadRequest as e:
            return error(400, str(e))
        async with session.lock:
            found = session.records()
            problems = session.check(found)
        return JSONResponse({"session": sid, "records": [r.model_dump(mode="json") for r in found],
                             "problems": problems})

    async def sessions(request: Request):
        out = []
        for sid in gateway.sessions.ids():
            s = gateway.sessions.get(sid)
            out.append({"id": sid, "chains": len(s.chains), "turns": sum(len(c.turns) for c in s.chains)})
        return JSONResponse({"sessions": out})

    async def status(request: Request):
        return JSONResponse(gateway.status())

    def admin(request: Request) -> Optional[JSONResponse]:
        given = request.headers.get("authorization", "")
        if hmac.compare_digest(given.encode(), f"Bearer {gateway.admin_token}".encode()):
            return None
        return error(401, "the admin routes need the token of STORE/admin.token", "authentication_error")

    async def pause(request: Request):
        denied = admin(request)
        if denied:
            return denied
        t0 = time.perf_counter()
        await gateway.gate.pause()
        return JSONResponse({**gateway.status(), "drained_in_s": round(time.perf_counter() - t0, 3)})

    async def resume(request: Request):
        denied = admin(request)
        if denied:
            return denied
        try:
            body = await read_json(request) if (await request.body()) else {}
            version = body.get("policy_version") if isinstance(body, dict) else None
            if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 0):
                raise BadRequest("policy_version: a whole number >= 0")
        except BadRequest as e:
            return error(400, str(e))
        gateway.gate.resume(version)
        return JSONResponse(gateway.status())

    return Starlette(routes=[
        Route("/sessions/{sid}/v1/chat/completions", chat, methods=["POST"]),
        Route("/sessions/{sid}/v1/models", models, methods=["GET"]),
        Route("/sessions/{sid}/records", records, methods=["GET"]),
        Route("/sessions", sessions, methods=["GET"]),
        Route("/status", status, methods=["GET"]),
        Route("/admin/pause", pause, methods=["POST"]),
        Route("/admin/resume", resume, methods=["POST"]),
    ])
