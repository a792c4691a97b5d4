"""Commands through the in-sandbox server, the same for every backend that runs it (Docker's, bwrap's):
the backend provides `spec` and `_request` (which turns a dead channel into the backend's own error)."""
from __future__ import annotations

from ..core import defaults
from .base import CommandResult, ExecResult
from .guest import protocol
from .serverfiles import CHANNEL_GRACE_S


class ServerCommands:
    async def run(self, command: str, timeout: float = defaults.COMMAND_TIMEOUT_S) -> CommandResult:
        reply = await self._request(protocol.RUN, timeout + CHANNEL_GRACE_S, cmd=command, timeout=timeout,
                                    limit=self.spec.output_limit_chars)
        return CommandResult(
            output=reply["output"], output_tail=reply.get("output_tail", ""), cut_chars=reply.get("cut_chars", 0),
            exit_code=reply.get("exit_code"), total_chars=reply.get("total_chars", 0),
            total_bytes=reply.get("total_bytes", 0), timed_out=reply.get("timed_out", False),
            shell_restarted=reply.get("shell_restarted", False), shell_exited=reply.get("shell_exited", False),
            streams_restored=reply.get("streams_restored", False), oom_kills=reply.get("oom_kills", 0),
            duration_s=reply.get("duration_s", 0.0), cwd=reply.get("cwd", ""))

    async def exec(self, argv: list[str], timeout: float = 60.0, stdin: str = "") -> ExecResult:
        reply = await self._request(protocol.EXEC, timeout + CHANNEL_GRACE_S, argv=argv, timeout=timeout, stdin=stdin)
        return ExecResult(exit_code=reply.get("exit_code"), stdout=reply.get("stdout", ""),
                          stderr=reply.get("stderr", ""), timed_out=reply.get("timed_out", False))
