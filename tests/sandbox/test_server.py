"""Pure functions: schemas, argument parsing, text tool calls, output clipping, prompts, archives."""
from __future__ import annotations

from insandbox.sandbox.guest.server import Collector


def test_collector_keeps_head_and_tail():
    c = Collector(200)
    for i in range(1000):
        c.feed(f"{i:04d}\n".encode())
    head, tail, cut = c.result()
    assert head.startswith("0000\n") and tail.endswith("0999\n")
    assert len(head) == len(tail) == 100 and cut == 5000 - 200 and c.chars == 5000
    small = Collector(100)
    small.feed(b"abc")
    assert small.result() == ("abc", "", 0)


def test_collector_never_splits_utf8():
    c = Collector(10_000)
    data = "é✓😀".encode() * 10
    for i in range(len(data)):  # byte by byte: a character arrives in pieces
        c.feed(data[i:i + 1])
    assert c.result()[0] == "é✓😀" * 10

