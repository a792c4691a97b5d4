"""Model server faults, survived or reported clearly: real HTTP to the scripted server playing
each fault (5xx storms, 429 with Retry-After, hung and trickling servers, cut bodies, garbage
bodies), through the client, a whole run, and the `insandbox run` command."""
from __future__ import annotations

import asyncio
import email.utils
import json

import pytest

from insandbox import Trajectory, arun
from insandbox.models import ModelError, OpenAIChatClient
from tests.helpers import cli

TOOLS = [{"type": "function", "function": {"name": "submit", "description": "done",
                                           "parameters": {"type": "object", "properties": {}, "required": []}}}]
FAST = (0.02, 0.1)  # backoff for the tests: first wait, longest wait


def ask(srv, run_async, **kw):
    """One completion through the real client. A hang fails the test instead of stalling it."""
    async def go():
        client = OpenAIChatClient("m", base_url=srv.url, **{"backoff": FAST, **kw})
        try:
            return await asyncio.wait_for(client.complete([{"role": "user", "content": "u"}], TOOLS), 30)
        finally:
            await client.close()
    return run_async(go())


def failing(fault: dict, times: int = 99) -> dict:
    """A script whose first turn (submit) fails `times` times with `fault`."""
    return {"turns": [{"tool": "submit", "fail": {**fault, "times": times}}]}


# ------------------------------------------------------------------------------- 5xx

def test_a_5xx_storm_is_retried_with_growing_waits_and_the_request_completes(scripted, run_async):
    srv = scripted({"faults": [{"requests": [1, 10], "status": [500, 502, 503]}], "turns": [{"tool": "submit"}]})
    reply = ask(srv, run_async, max_retries=10)
    reqs = srv.requests
    assert [r["status"] for r in reqs] == [500, 502, 503] * 3 + [500, 200]
    assert reply.tool_calls[0].name == "submit"
    assert len(reply.notes) == 10 and "model server error 502" in reply.notes[1] and "retry 10 of 10" in reply.notes[9]
    # exponential backoff: each wait at least 3/4 of first * 2**k, capped at the longest
    for k, (a, b) in enumerate(zip(reqs, reqs[1:])):
        assert b["t_recv"] - a["t_sent"] >= 0.75 * min(FAST[0] * 2 ** k, FAST[1])


def test_a_permanent_5xx_is_a_clear_error_naming_the_tries(scripted, run_async):
    srv = scripted(failing({"status": 503, "message": "the GPU fell off the bus"}))
    with pytest.raises(ModelError) as err:
        ask(srv, run_async, max_retries=2)
    assert str(err.value).startswith("model server error 503: the GPU fell off the bus (3 tries in ")
    assert "HTTP 503 x3; no retries left (max retries 2)" in str(err.value) and err.value.latency_s > 0
    assert len(srv.requests) == 3


def test_a_5xx_html_page_is_named_truncated(scripted, run_async):
    page = "<html><head><title>502 Bad Gateway</title></head><body>" + "nginx " * 1000 + "</body></html>"
    srv = scripted(failing({"status": 502, "body": page, "content_type": "text/html"}))
    with pytest.raises(ModelError, match=r"model server error 502: a body that is not JSON: '<html><head><title>502 "
                                         rf"Bad Gateway.*\.\.\. \({len(page):,} characters in all\)") as err:
        ask(srv, run_async, max_retries=0)
    assert len(str(err.value)) < 600


def test_the_server_can_say_not_to_retry(scripted, run_async):
    srv = scripted(failing({"status": 503, "headers": {"x-should-retry": "false"}}))
    with pytest.raises(ModelError, match=r"^model server error 503: scripted failure$"):
        ask(srv, run_async, max_retries=3)
    assert len(srv.requests) == 1
    for status, words in ((401, "authentication failed"), (403, "rejected the request \\(403\\)"),
                          (422, "rejected the request \\(422\\)")):  # never retried
        srv = scripted(failing({"status": status}))
        with pytest.raises(ModelError, match=words):
            ask(srv, run_async, max_retries=3)
        assert len(srv.requests) == 1


# ------------------------------------------------------------------------------- 429

def test_429_waits_for_retry_after_in_seconds(scripted, run_async):
    srv = scripted(failing({"status": 429, "headers": {"Retry-After": "1"}}, times=1))
    reply = ask(srv, run_async, max_retries=2)
    first, second = srv.requests
    assert (first["status"], second["status"]) == (429, 200) and reply.tool_calls[0].name == "submit"
    assert second["t_recv"] - first["t_sent"] >= 1.0
    assert reply.notes == ["rate limited (429): scripted failure; retry 1 of 2 in 1.00 s (Retry-After)"]
    srv = scripted(failing({"status": 503, "headers": {"retry-after-ms": "300"}}, times=1))  # OpenAI's header
    ask(srv, run_async, max_retries=1)
    first, second = srv.requests
    assert second["t_recv"] - first["t_sent"] >= 0.3


def test_429_waits_for_retry_after_as_an_http_date(scripted, run_async):
    srv = scripted(failing({"status": 429, "retry_after_date": 1}, times=1))
    reply = ask(srv, run_async, max_retries=1)
    first, second = srv.requests
    not_before = email.utils.parsedate_to_datetime(first["headers"]["Retry-After"]).timestamp()
    assert second["status"] == 200 and second["t_recv"] >= not_before
    assert "(Retry-After)" in reply.notes[0]


def test_a_retry_after_beyond_what_we_wait_is_a_clear_error_at_once(scripted, run_async):
    """Regression: the SDK gave up at once on a Retry-After over its 120 s cap, and the error said
    'rate limited after 5 retries' (none had been made). Ours waits up to max_retry_after (600 s)."""
    srv = scripted(failing({"status": 429, "message": "slow down", "headers": {"Retry-After": "900"}}))
    with pytest.raises(ModelError, match=r"^rate limited \(429\): slow down; the server asks to wait 900 s before "
                                         r"trying again \(Retry-After\), longer than the 600 s insandbox waits$"):
        ask(srv, run_async, max_retries=5)
    assert len(srv.requests) == 1


# ------------------------------------------------------------------------ no answer

def test_a_hung_server_times_out_is_retried_then_a_clear_error(scripted, run_async):
    srv = scripted(failing({"hang": True}, times=1))
    reply = ask(srv, run_async, timeout=1, max_retries=1)
    assert reply.tool_calls[0].name == "submit" and "did not answer within 1s" in reply.notes[0]
    srv = scripted(failing({"hang": True}))
    with pytest.raises(ModelError, match=r"^the model server did not answer within 1s \(2 tries in .* s: timeout x2; "
                                         r"no retries left \(max retries 1\)\)$"):
        ask(srv, run_async, timeout=1, max_retries=1)
    assert len(srv.requests) == 2


def test_a_trickling_answer_is_bounded_by_the_timeout(scripted, run_async):
    """Regression: a server sending a byte every 0.2 s never tripped the HTTP library's read timeout
    (it bounds the gaps between bytes), so one request could take forever."""
    srv = scripted(failing({"trickle": 0.2}))
    with pytest.raises(ModelError, match=r"^the model server did not answer within 1s \(not retried: max retries 0\)"):
        ask(srv, run_async, timeout=1, max_retries=0)


@pytest.mark.parametrize("fault,error", [
    ({"drop": True}, "broke before a complete answer: Server disconnected without sending a response"),
    ({"cut": 40}, r"broke before a complete answer: the connection closed before the whole answer came: "
                  r".*\(received 40 of 400 bytes"),
    ({"cut": 40, "length": False}, "not a chat completion: a body that is not JSON \\(application/json, 40 bytes\\): "
                                   "'{\"id\": \"chatcmpl-"),
    ({"cut": 40, "hang": True}, "did not answer within 1s"),
], ids=["dropped", "cut", "cut-no-length", "cut-then-silent"])
def test_a_cut_answer_is_retried_then_a_clear_error(scripted, run_async, fault, error):
    srv = scripted(failing(fault, times=1))
    reply = ask(srv, run_async, timeout=1, max_retries=1)
    assert reply.tool_calls[0].name == "submit" and len(reply.notes) == 1
    srv = scripted(failing(fault))
    with pytest.raises(ModelError, match=error) as err:
        ask(srv, run_async, timeout=1, max_retries=1)
    assert "(2 tries in " in str(err.value) and len(srv.requests) == 2


# ------------------------------------------------------------------------ garbage

HTML = "<html><body><h1>Service Unavailable</h1>" + "<p>try later</p>" * 100 + "</body></html>"
GARBAGE = {
    "text": ("text/plain", "not json at all", r"a body that is not JSON \(text/plain, 15 bytes\): 'not json at all'"),
    "html": ("text/html", HTML, rf"a body that is not JSON \(text/html, {len(HTML):,} bytes\): '<html><body><h1>"
                                rf"Service Unavailable.*\.\.\. \({len(HTML):,} characters in all\)"),
    "empty": ("application/json", "", r"an empty body \(application/json\)"),
    "not-an-object": ("application/json", "[1, 2]", r"JSON that is not an object: '\[1, 2\]'"),
    "no-choices": ("application/json", '{"id": "x", "choices": []}', r"""no choices: '{"id": "x", "choices": \[\]}'"""),
    "error-object": ("application/json", '{"error": {"message": "upstream overloaded", "code": 502}}',
                     r"an error instead of a completion: 'upstream overloaded'"),
    "message-a-string": ("application/json", '{"choices": [{"message": "hi"}]}', r"choices\[0\] has no message object"),
    "content-a-number": ("application/json", '{"choices": [{"message": {"content": 5}}]}',
                         r"the message's content is neither text nor null"),
    "tool-calls-not-a-list": ("application/json", '{"choices": [{"message": {"content": "x", "tool_calls": "nope"}}]}',
                              r"the message's tool_calls is not a list"),
    "tool-call-without-name": ("application/json",
                               '{"choices": [{"message": {"tool_calls": [{"function": {"arguments": "{}"}}]}}]}',
                               r"tool call 0 has no function with a name"),
}


@pytest.mark.parametrize("name", list(GARBAGE))
def test_a_200_with_garbage_is_retried_then_an_error_naming_what_came_back(scripted, run_async, name):
    """Regression (message-a-string, content-a-number): AttributeError and TypeError escaped the
    client, so a run ended as internal_error with the request unrecorded."""
    content_type, body, error = GARBAGE[name]
    fault = {"status": 200, "body": body, "content_type": content_type}
    srv = scripted(failing(fault, times=1))
    reply = ask(srv, run_async, max_retries=1)
    assert reply.tool_calls[0].name == "submit" and "not a chat completion" in reply.notes[0]
    srv = scripted(failing(fault))
    with pytest.raises(ModelError, match="^the model server answered 200 with something that is not a chat "
                                         f"completion: {error}") as err:
        ask(srv, run_async, max_retries=1)
    assert "(2 tries in " in str(err.value) and len(str(err.value)) < 700


def test_every_kind_of_failure_draws_on_one_retry_budget(scripted, run_async):
    """Regression: garbage bodies had their own budget on top of the SDK's, so a server alternating
    faults could take (retries + 1)^2 tries."""
    faults = [{"requests": 1, "status": 503}, {"requests": 2, "drop": True},
              {"requests": 3, "status": 200, "body": "<html/>"}, {"requests": 4, "status": 429}]
    srv = scripted({"faults": faults, "turns": [{"tool": "submit"}]})
    with pytest.raises(ModelError, match=r"^rate limited \(429\): scripted failure \(4 tries in .* s: HTTP 503 x1, "
                                         r"connection broken x1, not a chat completion x1, HTTP 429 x1; no retries "
                                         r"left \(max retries 3\)\)$"):
        ask(srv, run_async, max_retries=3)
    srv = scripted({"faults": faults, "turns": [{"tool": "submit"}]})
    assert len(ask(srv, run_async, max_retries=4).notes) == 4


# ------------------------------------------------------------------ whole runs, the command

def test_a_run_rides_out_a_5xx_storm(scripted, run_async, tmp_path, docker_image):
    srv = scripted({"faults": [{"requests": [2, 11], "status": [500, 502, 503]}],
                    "turns": [{"tool": "execute_bash", "args": {"command": "true"}}, {"tool": "submit"}]})

    async def run():
        client = OpenAIChatClient("scripted", base_url=srv.url, max_retries=10, backoff=FAST)
        try:
            return await arun("storm", model_client=client, output_dir=tmp_path, image=docker_image, max_steps=5)
        finally:
            await client.close()

    assert run_async(run()).trajectory.exit_reason == "submitted"
    saved = Trajectory.load(tmp_path / "trajectory.json")
    assert len(saved.steps) == 2 and not saved.failed_requests
    assert len(saved.steps[1].notes) == 10 and "retry 10 of 10" in saved.steps[1].notes[-1]  # the storm, recorded


def test_the_command_exits_1_with_the_reason_and_keeps_the_record(scripted, tmp_path, docker_image):
    """A permanent 5xx after a step: exit 1, the reason on stderr, the run so far saved."""
    srv = scripted({"turns": [{"tool": "execute_bash", "args": {"command": "echo one > /testbed/answer.txt"}},
                              {"tool": "submit", "fail": {"status": 500, "message": "overloaded", "times": 99}}]})
    r = cli("run", "x", "--model", "m", "--base-url", srv.url, "--max-retries", "1", "--out",
            str(tmp_path), "--image", docker_image, "-q", "--json")
    assert r.returncode == 1, r.stderr
    summary = json.loads(r.stdout)
    assert summary["exit_reason"] == "model_error" and summary["answer"] == "one\n"
    assert summary["exit_detail"].startswith("model server error 500: overloaded (2 tries in ")
    assert "model_error" in r.stderr and "overloaded" in r.stderr
    t = json.loads((tmp_path / "trajectory.json").read_text())
    assert len(t["steps"]) == 1 and t["steps"][0]["tool_calls"][0]["exit_code"] == 0  # the work so far is kept
    assert t["failed_requests"][0]["error"] == summary["exit_detail"]
    assert t["failed_requests"][0]["exit_reason"] == "model_error"
    assert (tmp_path / "answer.txt").read_text() == "one\n"


def test_the_command_times_out_a_hung_server_by_request_timeout(scripted, tmp_path):
    srv = scripted({"turns": [], "llm_turns": [{"content": "x", "fail": {"hang": True, "times": 99}}]})
    r = cli("run", "x", "--mode", "llm", "--model", "m", "--base-url", srv.url, "--request-timeout", "1",
            "--max-retries", "1", "--out", str(tmp_path), "-q", "--json", timeout=60)
    assert r.returncode == 1, r.stderr
    detail = json.loads(r.stdout)["exit_detail"]
    assert detail.startswith("the model server did not answer within 1s (2 tries in ") and "timeout x2" in detail
    t = json.loads((tmp_path / "trajectory.json").read_text())
    assert t["exit_reason"] == "model_error" and t["failed_requests"][0]["error"] == detail
    assert len(srv.requests) == 2
