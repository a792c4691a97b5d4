"""What model calls cost: a price table per model, in USD per million tokens.

The table is read from these YAML files, a later one replacing an earlier one's entries of the
same name (and adding its other entries):

  1. prices.yaml beside this file: public list prices as of the date it gives (they change);
  2. $XDG_CONFIG_HOME/insandbox/prices.yaml (default ~/.config/insandbox/prices.yaml), if there;
  3. the file named by $INSANDBOX_PRICES;
  4. --prices FILE (RunConfig.prices).

A model's name is looked up in that order: the same name; the same name without a provider prefix
(`anthropic/`, `Qwen/`) and a date suffix (`-20250929`, `-2024-08-06`), dots and dashes alike
(`claude-sonnet-4.5` is `claude-sonnet-4-5`); a glob pattern (`my-finetune-*`); and the longest
entry the name starts with, followed by `-`, `:` or `@` (`gpt-4o-audio-preview` is priced as
`gpt-4o`, but `gpt-5.2` is not priced as `gpt-5`). The trajectory records which entry matched
and how.

A model served on this machine (a loopback address, or the embedded model) costs 0 unless one of
the user's own files (2-4) prices it: list prices are what an API charges, and a proxy on
localhost in front of a paid API is the case to price by hand. A model no entry matches has cost
None ("unknown price"), never 0.
"""
from __future__ import annotations

import datetime as _dt
import fnmatch
import functools
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..core.errors import ConfigError
from ..core.price import Match, Price  # noqa: F401 (what a run records)
from ..core.yaml_file import load_cached

PACKAGED = Path(__file__).with_name("prices.yaml")
_DATE_SUFFIX = re.compile(r"[-@](\d{8}|\d{4}-\d{2}-\d{2}|latest)$")
_PREFIX_ENDS = "-:@"  # what may follow an entry's name for a longer name to be priced by it
_GLOB = re.compile(r"[*?\[]")


class PriceEntry(BaseModel):
    """One model's prices in a price file, USD per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: Optional[float] = Field(default=None, ge=0)  # None: charged as input
    cache_write: Optional[float] = Field(default=None, ge=0)  # None: charged as input
    note: Optional[str] = None


class PriceFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: Optional[str] = None
    as_of: Optional[str] = None
    note: Optional[str] = None
    prices: dict[str, PriceEntry] = Field(default_factory=dict)

    @field_validator("as_of", mode="before")
    @classmethod
    def _date_as_text(cls, v):  # YAML reads an unquoted 2025-11-15 as a date
        return v.isoformat() if isinstance(v, _dt.date) else v




@dataclass(frozen=True)
class _Entry:
    name: str
    price: PriceEntry
    source: str
    as_of: Optional[str]
    user: bool  # from the user's own files, not the packaged table


def canonical(name: str) -> str:
    """A model name without a provider prefix and a date suffix, lower case."""
    name = name.strip().lower().rsplit("/", 1)[-1]
    return _DATE_SUFFIX.sub("", name)


def _dashed(name: str) -> str:
    return name.replace(".", "-")  # the same length: positions in one are positions in the other


class PriceTable:
    def __init__(self, entries: Optional[list[_Entry]] = None):
        self.entries: dict[str, _Entry] = {}
        for e in entries or []:
            self.entries[e.name.lower()] = e  # a later file's entry replaces an earlier one's

    def add_file(self, path: Path, user: bool, source: Optional[str] = None) -> None:
        parsed = read_price_file(path)
        for name, price in parsed.prices.items():
            self.entries[name.lower()] = _Entry(name, price, source or str(path), parsed.as_of, user)

    def find(self, model: str, user_only: bool = False) -> Optional[tuple[_Entry, Match]]:
        """The entry that prices `model`, and how it matched; None when none does."""
        entries = [e for e in self.entries.values() if e.user or not user_only]
        raw, name = model.strip().lower(), canonical(model)
        plain = [e for e in entries if not _GLOB.search(e.name)]
        for e in plain:
            if e.name.lower() == raw:
                return e, "exact"
        for e in plain:
            if _dashed(canonical(e.name)) == _dashed(name):
                return e, "exact"
        patterns = [e for e in entries if _GLOB.search(e.name)
                    and (fnmatch.fnmatchcase(raw, e.name.lower()) or fnmatch.fnmatchcase(name, e.name.lower()))]
        if patterns:  # the most specific: the most characters that are not wildcards
            return max(patterns, key=lambda e: len(_GLOB.sub("", e.name))), "pattern"
        best = None
        for e in plain:
            key = _dashed(canonical(e.name))
            if (_dashed(name).startswith(key) and len(name) > len(key) and name[len(key)] in _PREFIX_ENDS
                    and (best is None or len(key) > len(_dashed(canonical(best.name))))):
                best = e
        return (best, "prefix") if best else None

    def price_of(self, model: str, local: bool = False) -> Price:
        """The price of `model`'s calls; `local`: served on this machine (0 unless the user's files price it)."""
        found = self.find(model, user_only=local)
        if found is None:
            if local:
                return Price(model=model, match="local", input=0.0, output=0.0, cache_read=0.0, cache_write=0.0,
                             source="local")
            return Price(model=model, match="unknown")
        e, how = found
        p = e.price
        return Price(model=model, match=how, entry=e.name, input=p.input, output=p.output,
                     cache_read=p.input if p.cache_read is None else p.cache_read,
                     cache_write=p.input if p.cache_write is None else p.cache_write,
                     source=e.source, as_of=e.as_of)


def read_price_file(path: Path) -> PriceFile:
    """A price file, or a ConfigError naming the file and the entry that is wrong (checked once per
    content: every run of a process reads the packaged table)."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from None
    return _price_file(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _price_file(path: Path, mtime_ns: int, size: int) -> PriceFile:
    try:
        data = load_cached(path)
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror or e}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    if data is None:
        return PriceFile()
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a price file is a mapping with a `prices:` key (see docs/guide/cost.md ('Cost'))")
    try:
        return PriceFile.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{path}: " + "; ".join(_error(err) for err in e.errors())) from None


def _error(err: dict) -> str:
    where = ".".join(str(x) for x in err.get("loc", ())) or "file"
    if err.get("type") == "extra_forbidden":
        known = "input, output, cache_read, cache_write, note" if len(err["loc"]) > 2 else \
            "source, as_of, note, prices"
        return f"{where}: unknown key (known: {known})"
    return f"{where}: {err.get('msg', 'invalid').removeprefix('Value error, ')}"


def user_config_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "insandbox" / "prices.yaml"


def load_prices(extra: Optional[Path] = None) -> PriceTable:
    """The packaged table with the user's files laid over it; a ConfigError for a missing or bad file."""
    table = PriceTable()
    table.add_file(PACKAGED, user=False, source="packaged")
    if user_config_file().is_file():
        table.add_file(user_config_file(), user=True)
    for label, path in (("INSANDBOX_PRICES", os.environ.get("INSANDBOX_PRICES")), ("--prices", extra)):
        if not path:
            continue
        if not Path(path).is_file():
            raise ConfigError(f"{label} {path}: no such file")
        table.add_file(Path(path), user=True)
    return table


def usd(amount: Optional[float]) -> str:
    """Dollars for people: three significant digits under $1 ($0.0303), cents above; None is unknown."""
    if amount is None:
        return "unknown"
    if amount == 0:
        return "$0"
    if amount >= 1:
        return f"${amount:,.2f}"
    return f"${amount:.{min(-math.floor(math.log10(amount)) + 2, 8)}f}"

