"""The two-turn conversation the server tests hold: the loop's own message shapes, through any client."""
from __future__ import annotations

from insandbox.tools import default_tools

TOOLS = [t.schema() for t in default_tools()]
TOOL_NAMES = {t["function"]["name"] for t in TOOLS}
MESSAGES = [{"role": "system", "content": "You are an agent with a Linux computer. Act only through the tools."},
            {"role": "user", "content": "Run `ls /testbed` with the execute_bash tool."}]


def two_turns(run_async, client) -> list:
    """Ask, send back the reply with a result for each structured call (a user nudge otherwise, as the
    loop does for calls written as text or none), ask again; the client is closed afterwards."""
    async def body():
        try:
            messages = list(MESSAGES)
            first = await client.complete(messages, TOOLS)
            messages.append(first.message)
            if first.tool_calls and not first.tool_calls_from_text:
                messages += [{"role": "tool", "tool_call_id": c.id, "content": "notes.txt\ndata.csv"}
                             for c in first.tool_calls]
            else:
                messages.append({"role": "user", "content": "Use a tool."})
            return [first, await client.complete(messages, TOOLS)]
        finally:
            await client.close()
    return run_async(body())
