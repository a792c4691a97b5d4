"""Pause and drain around a weight update: new requests wait, those in flight finish, and the turns after
the update carry the new policy version. The admin routes need the store's token."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from insandbox.gateway import GatewayClient, GatewayError

from .conftest import CALL, SUBMIT
from .test_sessions import START, TOOLS


def test_pause_drains_holds_new_requests_and_resume_sets_the_version(gateway_factory):
    served = gateway_factory([CALL.format("ls"), SUBMIT], delay=1.5)
    admin = GatewayClient(served.url, store=served.store)
    order: list[str] = []
    results: dict[str, int] = {}

    def ask(sid: str) -> None:
        r = served.chat(sid, START, tools=TOOLS)
        results[sid] = r.json()["policy_version"]
        order.append(f"answered {sid}")

    before = threading.Thread(target=ask, args=("before",))
    before.start()
    while admin.status()["in_flight"] == 0:
        time.sleep(0.02)
    status = admin.pause()  # returns once the request in flight is answered
    assert status["paused"] and status["in_flight"] == 0
    # its turn was recorded before the drain ended (the client's own thread may read the reply later)
    assert served.records("before")["records"][0]["num_turns"] == 1
    after = threading.Thread(target=ask, args=("after",))
    after.start()
    time.sleep(2.5)  # a paused gateway holds it: not answered, not sent upstream
    assert "answered after" not in order and len(served.upstream.calls) == 2  # the probe and "before"
    admin.resume(policy_version=7)
    after.join(30)
    before.join(30)
    assert results == {"before": 0, "after": 7}
    assert served.records("after")["records"][0]["policy_version"] == 7
    assert served.records("before")["records"][0]["policy_versions"] == [0]


def test_a_turn_sampled_after_an_update_gives_the_record_its_oldest_version(gateway_factory):
    served = gateway_factory([CALL.format("ls"), CALL.format("pwd"), SUBMIT])
    admin = GatewayClient(served.url, store=served.store)
    messages = list(START)
    reply = served.chat("v", messages, tools=TOOLS).json()["choices"][0]["message"]
    admin.pause()
    admin.resume(policy_version=3)
    messages += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "f"}]
    assert served.chat("v", messages, tools=TOOLS).status_code == 200
    (rec,) = served.records("v")["records"]
    assert rec["policy_versions"] == [0, 3] and rec["policy_version"] == 0


def test_the_admin_routes_need_the_token(gateway_factory, tmp_path):
    served = gateway_factory([SUBMIT])
    for route in ("/admin/pause", "/admin/resume"):
        assert httpx.post(served.url + route, timeout=10).status_code == 401
        assert httpx.post(served.url + route, headers={"Authorization": "Bearer guess"}, timeout=10).status_code == 401
    assert not GatewayClient(served.url).status()["paused"]
    with pytest.raises(GatewayError, match="admin token"):
        GatewayClient(served.url, store=tmp_path / "elsewhere").pause()
    token = (served.store / "admin.token").read_text()
    assert (served.store / "admin.token").stat().st_mode & 0o077 == 0
    bad = httpx.post(served.url + "/admin/resume", headers={"Authorization": f"Bearer {token}"},
                     json={"policy_version": -1}, timeout=10)
    assert bad.status_code == 400
