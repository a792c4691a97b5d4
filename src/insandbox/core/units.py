"""Sizes and addresses, each read one way everywhere.

- `parse_size`: bytes from what a person writes (512, 512k, 64m, 1.5g; binary units);
  `format_size` the other way (what the command line shows and takes).
- `is_loopback` / `is_loopback_host`: a URL or host that only this machine can reach (localhost, a
  loopback address). What the viewer listens on, and where a fork may send a conversation unasked.
- `is_local`: an endpoint on this machine in the wider sense a price needs (the embedded model,
  `*.localhost`, a loopback or unspecified address such as 0.0.0.0): a local model costs nothing.
"""
from __future__ import annotations

import ipaddress
import re
from typing import Optional
from urllib.parse import urlparse


def parse_size(text: str) -> int:
    """Bytes from 512, 512k, 64m, 1.5g (binary units)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*", str(text).lower())
    if not m:
        raise ValueError(f"{text!r} is not a size (e.g. 512m, 2g)")
    return int(float(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " "))


def format_size(n: Optional[int]) -> str:
    """Bytes as the command line takes them: 4g, 512m, 3k, 1000; none for no limit."""
    if n is None:
        return "none"
    for unit, scale in (("g", 1024 ** 3), ("m", 1024 ** 2), ("k", 1024)):
        if n and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_loopback(url: Optional[str]) -> bool:
    return is_loopback_host(urlparse(url or "").hostname or "")


def is_local(base_url: Optional[str]) -> bool:
    """An endpoint on this machine: the embedded model, localhost, a loopback or unspecified address."""
    if base_url == "embedded":
        return True
    host = urlparse(base_url or "").hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified
