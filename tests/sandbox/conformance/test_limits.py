"""Resource limits: the ones a backend declares it holds (Capabilities.limits) stop what passes them,
and the sandbox's own doing is never put on the infrastructure; one it does not declare is refused in
one line when the sandbox is made."""
from __future__ import annotations

import pytest

from insandbox.sandbox import SandboxBrokenByItself, SandboxError, SetupError

# what passing each limit looks like inside, and the words of a refusal from inside (a failed fork,
# a failed allocation) when the sandbox lives on
PAST = {
    "memory": ("256m", "python3 -c 'b = bytearray(600 * 1024 ** 2); b[::4096] = b\"x\" * len(b[::4096]); "
                       "print(\"allocated\", len(b))'"),
    "pids": (64, "python3 -c '\nimport os, time\nkids = []\ntry:\n    for _ in range(200):\n"
                 "        pid = os.fork()\n        if pid == 0:\n            time.sleep(30)\n            os._exit(0)\n"
                 "        kids.append(pid)\n    print(\"forked 200\")\nexcept OSError as e:\n    print(e)\n"
                 "for pid in kids:\n    os.kill(pid, 9)\n'"),
}


@pytest.mark.parametrize("limit", list(PAST))
def test_a_declared_limit_holds_and_another_is_refused(backend, limit):
    value, command = PAST[limit]
    if limit not in backend.caps.limits:
        with pytest.raises(SetupError) as e:
            backend.cls(backend.spec(limits={limit: value}))
        assert str(e.value).startswith(f"the {backend.cls.backend} backend cannot hold a {limit} limit")
        assert "\n" not in str(e.value)
        return

    async def body():
        sb = await backend.make(limits={limit: value})
        try:
            r = await sb.run(command, timeout=120)
        except SandboxBrokenByItself as e:  # e.g. gVisor: its kernel dies with the sandbox
            return f"broken by itself: {e}"
        except SandboxError as e:
            raise AssertionError(f"passing its own {limit} limit was put on the infrastructure: {e}") from None
        return r

    r = backend.run(body)
    if isinstance(r, str):
        return
    if limit == "memory":
        assert f"allocated {600 * 1024 ** 2}" not in r.output and (r.exit_code != 0 or r.oom_kills), r
    else:
        assert "Resource temporarily unavailable" in r.output and "forked 200" not in r.output, r.output
