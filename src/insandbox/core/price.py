"""The price a run's model calls are charged at, as its trajectory records it (models/pricing.py finds
it in the price tables)."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel

Match = Literal["exact", "pattern", "prefix", "local", "unknown"]

class Price(BaseModel):
    """The price a run's model calls are charged at, as recorded in its trajectory."""

    model: str  # the model's name as the run used it
    match: Match  # how the entry was found; "local": served on this machine; "unknown": no entry
    entry: Optional[str] = None  # the table's name (or pattern) that matched
    input: Optional[float] = None  # USD per million tokens
    output: Optional[float] = None
    cache_read: Optional[float] = None
    cache_write: Optional[float] = None
    source: Optional[str] = None  # "packaged", a price file's path, or "local"
    as_of: Optional[str] = None

    @property
    def known(self) -> bool:
        return self.match != "unknown"

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_tokens: Optional[int] = None,
             cache_write_tokens: Optional[int] = None) -> Optional[float]:
        """USD for one model call; prompt_tokens include the cached and cache-written ones (as OpenAI counts)."""
        if not self.known:
            return None
        cached, written = cached_tokens or 0, cache_write_tokens or 0
        uncached = max(prompt_tokens - cached - written, 0)  # a server's odd counts never make a negative charge
        usd = (uncached * self.input + cached * self.cache_read + written * self.cache_write
               + completion_tokens * self.output) / 1e6
        return round(usd, 10)

    def describe(self) -> str:
        """One line for the console and the report: what the price is and where it came from."""
        if not self.known:
            return f"no price for {self.model!r}"
        if self.match == "local":
            return "served on this machine: $0"
        how = "" if self.match == "exact" else f" (by {self.match})"
        cached = f" (${self.cache_read:g} cached)" if self.cache_read != self.input else ""
        return f"{self.entry}{how}: ${self.input:g} in{cached}, ${self.output:g} out per M tokens"
