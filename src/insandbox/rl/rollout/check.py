"""The check that a record's ids are the conversation the environment saw.

    decode(prompt_ids + response_ids) + the end of the last turn == template(conversation)

where the conversation is the trajectory's messages up to the model's last turn (the episode's
final results are never tokenized: no model token follows them), and every run of mask-1 ids
decodes to one of the model's turns, in order. A record that passes was trained on exactly what
the policy sampled and the sandbox answered, with the environment's tokens masked.
"""
from __future__ import annotations

from .chat import ChatFormat
from .types import RolloutRecord


def check_record(record: RolloutRecord, chat: ChatFormat) -> list[str]:
    """Problems found ([] when the record is consistent)."""
    problems = []
    n = len(record.response_ids)
    if len(record.response_mask) != n:
        problems.append(f"response_mask has {len(record.response_mask)} entries for {n} response ids")
    if record.response_logprobs is not None and len(record.response_logprobs) != n:
        problems.append(f"response_logprobs has {len(record.response_logprobs)} entries for {n} response ids")
    messages = list(record.trajectory.get("messages") or [])
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    if last < 0:
        return problems + ["the trajectory holds no model turn"]
    conversation = messages[: last + 1]
    stopped = bool(record.response_ids) and record.response_ids[-1] in chat.stop_token_ids
    decoded = chat.decode(record.prompt_ids + record.response_ids) + (chat.glue if stopped else chat.turn_end)
    expected = chat.render(conversation)
    if decoded != expected:
        at = next((i for i, (a, b) in enumerate(zip(decoded, expected)) if a != b), min(len(decoded), len(expected)))
        problems.append(f"decoded ids differ from the rendered conversation at character {at}: "
                        f"{decoded[max(at - 40, 0):at + 40]!r} != {expected[max(at - 40, 0):at + 40]!r}")
    # assistant turns the policy did not sample (history a gateway was sent) are part of the prompt
    skip = int(record.trajectory.get("prompt_turns") or 0)
    turns = [m["content"] for m in conversation if m.get("role") == "assistant"][skip:]
    sampled = _runs(record.response_ids, record.response_mask)
    if len(sampled) != len(turns):
        problems.append(f"{len(sampled)} runs of model tokens for {len(turns)} model turns")
    for i, (ids, text) in enumerate(zip(sampled, turns)):
        if chat.assistant_text(ids) != text:
            problems.append(f"model turn {i + 1}: its masked-in ids decode to {chat.assistant_text(ids)[:80]!r}, "
                            f"the conversation holds {text[:80]!r}")
    return problems


def _runs(ids: list[int], mask: list[int]) -> list[list[int]]:
    """The consecutive runs of ids whose mask is 1."""
    runs: list[list[int]] = []
    previous = 0
    for token, m in zip(ids, mask):
        if m and not previous:
            runs.append([])
        if m:
            runs[-1].append(token)
        previous = m
    return runs
