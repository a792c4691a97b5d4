"""The persistent shell: what the model's commands leave behind (working folder, exported variables,
functions, background jobs) carries over, exit codes and stderr come back, stdin is empty, a long
output is cut in the middle, and the shell survives a syntax error and even `exit`."""
from __future__ import annotations

from tests.sandbox.conformance.cases import COUNT_SLEEPS


def test_state_persists_between_commands(backend):
    async def body():
        sb = await backend.make()
        r = await sb.run("cd /tmp && export FOO=bar && greet() { echo hello $1; }")
        assert r.exit_code == 0 and r.cwd == "/tmp"
        r = await sb.run("pwd; echo $FOO; greet you")
        assert r.output.splitlines() == ["/tmp", "bar", "hello you"] and r.exit_code == 0 and r.cwd == "/tmp"
        await sb.run("sleep 300 >/dev/null 2>&1 &")  # a background job keeps running after its command
        assert "sleeps=1" in (await sb.run(COUNT_SLEEPS)).output
    backend.run(body)


def test_exit_codes_stderr_and_empty_stdin(backend):
    async def body():
        sb = await backend.make()
        await sb.run("export KEEP=1 && cd /usr")
        r = await sb.run("echo out; echo err >&2; exit_with() { return $1; }; exit_with 7")
        assert r.exit_code == 7 and "out" in r.output and "err" in r.output
        r = await sb.run("cat; echo read-nothing")  # stdin is empty: cat must not wait for input
        assert r.output.strip() == "read-nothing" and not r.timed_out
        r = await sb.run("if then fi")  # a syntax error is an error, not a dead shell
        assert r.exit_code == 2 and "syntax error" in r.output
        assert (await sb.run("echo still here")).output == "still here\n"
        r = await sb.run("exit 3")  # the command ends the shell: a new one, with the state it had
        assert r.exit_code == 3 and r.shell_exited
        assert (await sb.run("echo $KEEP $PWD")).output == "1 /usr\n"
    backend.run(body)


def test_a_long_output_is_cut_in_the_middle(backend):
    async def body():
        sb = await backend.make(output_limit_chars=16000)
        r = await sb.run("python3 -c \"import sys; sys.stdout.write('%07d ' * 2500000 % tuple(range(2500000)) + "
                         "'\\n')\"")  # a single 20 MB line
        assert r.exit_code == 0 and r.total_chars == 20_000_001
        assert r.output.startswith("0000000 0000001") and r.output_tail.endswith("2499999 \n")
        assert len(r.output) + len(r.output_tail) <= 16000
        assert r.cut_chars == 20_000_001 - len(r.output) - len(r.output_tail)
    backend.run(body)
