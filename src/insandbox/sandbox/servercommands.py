"""Commands through the in-sandbox server, the same for every backend that runs it (Docker's, bwrap's):
a mixin of a `Sandbox` subclass (base.py) that provides `spec`, `_request` (which turns a dead channel into
the backend's own error) and `_process_view` (the sandbox's processes as this machine sees them,
hostview.py; None where it cannot). It writes two of the five members a backend must: `run` and `exec`.

A command that times out is killed by the server with everything it started; whether that happened
is then read from this machine: what is left of the command is killed from here, and the result says
whether the host saw it gone (`kill_checked`) and what would not die (`survivors`)."""
from __future__ import annotations

import asyncio
from typing import Optional

from ..core import defaults
from . import hostview
from .base import CommandResult, ExecResult
from .guest import protocol
from .serverfiles import CHANNEL_GRACE_S


class ServerCommands:
    async def _process_view(self) -> Optional[hostview.ProcessView]:
        return None

    async def run(self, command: str, timeout: float = defaults.COMMAND_TIMEOUT_S) -> CommandResult:
        began = hostview.boot_ticks()
        reply = await self._request(protocol.RUN, timeout + CHANNEL_GRACE_S, cmd=command, timeout=timeout,
                                    limit=self.spec.output_limit_chars)
        result = CommandResult(
            output=reply["output"], output_tail=reply.get("output_tail", ""), cut_chars=reply.get("cut_chars", 0),
            exit_code=reply.get("exit_code"), total_chars=reply.get("total_chars", 0),
            total_bytes=reply.get("total_bytes", 0), timed_out=reply.get("timed_out", False),
            shell_restarted=reply.get("shell_restarted", False), shell_exited=reply.get("shell_exited", False),
            streams_restored=reply.get("streams_restored", False), oom_kills=reply.get("oom_kills", 0),
            duration_s=reply.get("duration_s", 0.0), cwd=reply.get("cwd", ""))
        if result.timed_out:
            view = await self._process_view()
            if view is not None:
                left = await asyncio.to_thread(self._leftovers_killed, view, reply, began)
                result.kill_checked, result.survivors = left is not None, len(left or ())
        return result

    @staticmethod
    def _leftovers_killed(view: hostview.ProcessView, reply: dict, began: int) -> Optional[set[int]]:
        """What the timed-out command left running, killed from this machine; returns what survived
        that too (None: this machine could not tell)."""
        pids = view.pids()
        if pids is None:
            return None
        tasks = hostview.tasks_of(pids)
        shell = {pid for pid, t in tasks.items() if t.ns_pid == reply.get("shell_pid") and t.ppid == view.init_pid}
        last_pid = int(reply.get("started_last_pid") or 0)
        left = hostview.command_leftovers(tasks, {view.init_pid, *shell}, began, last_pid)
        return view.kill_until_gone(left) if left else set()

    async def exec(self, argv: list[str], timeout: float = 60.0, stdin: str = "") -> ExecResult:
        reply = await self._request(protocol.EXEC, timeout + CHANNEL_GRACE_S, argv=argv, timeout=timeout, stdin=stdin)
        return ExecResult(exit_code=reply.get("exit_code"), stdout=reply.get("stdout", ""),
                          stderr=reply.get("stderr", ""), timed_out=reply.get("timed_out", False))
