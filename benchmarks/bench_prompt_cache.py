"""What Anthropic prompt caching saves over a 20-step run: the Messages API client against the
scripted server (which caches prefixes as the API does), with and without cache_control, priced
with the packaged table.

    .venv/bin/python benchmarks/bench_prompt_cache.py [--steps 20] [--model claude-sonnet-4-5]
"""
from __future__ import annotations

import argparse
import asyncio

from insandbox.models.anthropic_messages import AnthropicClient
from insandbox.models.pricing import load_prices, usd
from insandbox.models.scripted_server import ScriptedServer
from insandbox.prompts import load_prompt_config
from insandbox.tools import ToolBox, default_tools


async def play(url: str, steps: int, caching: bool, tools: list[dict]) -> list:
    client = AnthropicClient("claude-bench", base_url=url, prompt_caching=caching)
    messages = load_prompt_config(None).sandbox_messages("Analyse the CSV files in /testbed/input and report.")
    usages = []
    try:
        for i in range(steps):
            reply = await client.complete(messages, tools)
            usages.append(reply.usage)
            messages.append(reply.message)
            messages.extend({"role": "tool", "tool_call_id": c.id, "content": f"line {i}\n" * 40}
                            for c in reply.tool_calls)
    finally:
        await client.close()
    return usages


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--model", default="claude-sonnet-4-5", help="whose prices to apply")
    args = ap.parse_args()
    tools = ToolBox(default_tools()).schemas()
    turns = [{"tool": "execute_bash", "args": {"command": f"head -n 40 /testbed/input/part{i}.csv"}}
             for i in range(args.steps)]
    price = load_prices().price_of(args.model)
    print(f"{args.steps} steps, prices of {args.model}: {price.describe()}\n")
    print("| prompt caching | prompt tokens | cache read | cache write | uncached | cost |")
    print("|---|---|---|---|---|---|")
    for caching in (False, True):
        with ScriptedServer({"turns": turns}) as srv:
            usages = asyncio.run(play(srv.url, args.steps, caching, tools))
        prompt = sum(u.prompt_tokens for u in usages)
        read = sum(u.cached_tokens or 0 for u in usages)
        write = sum(u.cache_write_tokens or 0 for u in usages)
        cost = sum(price.cost(u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.cache_write_tokens) or 0
                   for u in usages)
        print(f"| {'on' if caching else 'off'} | {prompt:,} | {read:,} ({read / prompt:.0%}) | {write:,} | "
              f"{prompt - read - write:,} | {usd(cost)} |")


if __name__ == "__main__":
    main()
