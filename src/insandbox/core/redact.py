"""Credentials kept out of what insandbox stores and prints.

The model server still gets the real values: only the copies written to a run folder
(trajectory.json, bench.json, records) or shown (the console, error messages) are redacted,
each secret replaced by MARK:

- a URL's user information: `http://user:KEY@host/v1` -> `http://user:***@host/v1`, and a user
  alone, often the token itself (`https://TOKEN@host`) -> `https://***@host`. Scheme, host, port
  and path stay, so the record still says which server;
- the value of a URL query parameter whose name looks like a secret: `?api_key=***`;
- in settings such as `extra_body` (nested dicts and lists), a value under a key whose name looks
  like a secret: `{"api_key": "***"}`. Booleans and null stay (`"use_auth_token": true` is none);
- the known secrets (the API key in use and the values found above) wherever they appear in text,
  e.g. a server's error message that echoes the request. Ones shorter than MIN_HUNTED characters
  are only redacted where they stand alone, not hunted for inside other words.

A name looks like a secret when its last word (split at `_`, `-`, `.` and camelCase, any case)
is one of SECRET_WORDS (`api_key`, `X-API-Key`, `accessToken`, `client_secret`, `sig`), unless
the whole name is one of NOT_SECRET (tokenizer tokens and cache keys that servers take).
"""
from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Any, Optional
from urllib.parse import unquote, unquote_plus

MARK = "***"
MIN_HUNTED = 6  # shorter ones would mask common words and numbers; real keys are far longer
SECRET_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "passphrase", "authorization", "auth",
    "credential", "credentials", "signature", "sig", "cookie", "bearer", "jwt"})
NOT_SECRET = frozenset({
    "prompt_cache_key", "cache_key", "eos_token", "bos_token", "pad_token", "unk_token", "sep_token", "cls_token",
    "mask_token"})

# a URL inside text: a scheme, then anything up to a space or a quote
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>`]*")
# scheme, authority (up to the path, query or fragment), the rest
_URL_PARTS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)(.*)", re.S)


def is_secret_name(name: Any) -> bool:
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower()
    words = [w for w in re.split(r"[^a-z0-9]+", words) if w]
    return bool(words) and words[-1] in SECRET_WORDS and "_".join(words) not in NOT_SECRET


def _split(url: str) -> Optional[tuple[str, Optional[str], str, str, str]]:
    """(scheme://, userinfo or None, host[:port], path, ?query#fragment), or None for what is not a URL.
    The userinfo ends at the authority's last @, as httpx reads it (an unencoded @ in a password)."""
    m = _URL_PARTS.fullmatch(url)
    if not m:
        return None
    scheme, authority, rest = m.groups()
    userinfo, at, host = authority.rpartition("@")
    path, q, query = rest.partition("?")
    return scheme, userinfo if at else None, host, path, q + query


def _query_pairs(query: str) -> list[tuple[str, str, str]]:
    """(name, "=", value) of each parameter of a query (without its `?` and fragment)."""
    return [p.partition("=") for p in query.split("&")]


def redact_url(url: str) -> str:
    """The URL with its credentials replaced by MARK; anything that is not a URL as it is."""
    parts = _split(url)
    if parts is None:
        return url
    scheme, userinfo, host, path, query = parts
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        host = (f"{user}:{MARK}@" if colon else f"{MARK}@") + host
    if query:
        body, hash_, fragment = query[1:].partition("#")
        pairs = [f"{n}={MARK}" if eq and v and is_secret_name(unquote_plus(n)) else n + eq + v
                 for n, eq, v in _query_pairs(body)]
        query = "?" + "&".join(pairs) + hash_ + fragment
    return scheme + host + path + query


def secrets_in(*values: Any) -> set[str]:
    """The secrets redact() hides in `values` (URLs, settings), in the forms text may show them: as
    written, percent-decoded, and a URL's `user:password` as the Basic header carries it. A bare string
    among `values` (an API key) counts as a secret itself."""
    found: set[str] = set()

    def add(secret: str) -> None:
        for form in (secret, unquote(secret)):
            if form and form != MARK:
                found.add(form)

    def walk(value: Any, secret: bool = False) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, secret or is_secret_name(k))
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, secret)
        elif secret and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            add(str(value))
        elif isinstance(value, str):
            for url in _URL.findall(value):
                _, userinfo, _, _, query = _split(url) or ("", None, "", "", "")
                if userinfo:
                    user, colon, password = userinfo.partition(":")
                    add(password if colon else user)
                    if colon and password:
                        add(base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode())
                for n, eq, v in _query_pairs(query[1:].partition("#")[0]) if query else ():
                    if eq and v and is_secret_name(unquote_plus(n)):
                        add(v)
                        add(unquote_plus(v))

    for value in values:
        if isinstance(value, str) and not _URL.fullmatch(value):
            add(value)  # a key given on its own
        else:
            walk(value)
    return found


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of `value` (text, a URL, or JSON-like settings) with every credential replaced by MARK:
    URL credentials, values under secret-looking keys, and the given `secrets` wherever they appear."""
    secrets = sorted({s for s in secrets if s and s != MARK}, key=len, reverse=True)  # longest first
    return _redact(value, secrets)


def _redact(value: Any, secrets: list[str]) -> Any:
    if isinstance(value, dict):
        return {k: MARK if is_secret_name(k) and _hideable(v) else _redact(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redact(v, secrets) for v in value]
    if isinstance(value, str):
        if value in secrets:
            return MARK
        text = _URL.sub(lambda m: redact_url(m.group(0)), value)
        for secret in secrets:
            if len(secret) >= MIN_HUNTED:
                text = text.replace(secret, MARK)
        return text
    return value


def _hideable(value: Any) -> bool:
    """Whether a value under a secret-looking key holds anything to hide (flags and nothing do not)."""
    return value not in (None, "", [], {}) and not isinstance(value, bool)


def is_redacted(value: Any) -> bool:
    """Whether a recorded value lost a credential to redaction (holds MARK somewhere)."""
    if isinstance(value, dict):
        return any(is_redacted(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(is_redacted(v) for v in value)
    return isinstance(value, str) and MARK in value


def fits(recorded: Any, given: Any) -> bool:
    """Whether `given` is what was redacted into `recorded`: equal wherever `recorded` kept its value."""
    if isinstance(recorded, dict) and isinstance(given, dict):
        return recorded.keys() == given.keys() and all(fits(recorded[k], given[k]) for k in recorded)
    if isinstance(recorded, list) and isinstance(given, (list, tuple)):
        return len(recorded) == len(given) and all(fits(r, g) for r, g in zip(recorded, given))
    if recorded == MARK:
        return _hideable(given)
    if isinstance(recorded, str) and isinstance(given, str) and MARK in recorded:
        pattern = ".+?".join(re.escape(piece) for piece in recorded.split(MARK))
        return re.fullmatch(pattern, given, re.S) is not None
    return recorded == given
