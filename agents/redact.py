"""Secrets out of everything medpanel writes: one function, applied where text leaves the process.

An endpoint may echo the API key in an error body ("Incorrect API key provided: sk-..."), a proxy
may echo the `Authorization` header. `redact` replaces the values of the keys medpanel was given
(registered by the backend that read them, plus any environment variable named like a key or a
token) and anything shaped like a bearer token or an `sk-` key. It runs at the choke points: the
model client's error recording, the store's commit (transcript body, row, status), the response
cache and every log record (`install_log_redaction`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import urllib.parse
from typing import Any

MASK = "[REDACTED]"

_MIN_SECRET = 8
"""Shorter values ("sk-no-key", a placeholder) are not worth masking and would mask ordinary words."""

_SECRET_ENV = re.compile(r"(API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD)", re.IGNORECASE)

_PATTERNS: list[tuple[tuple[str, ...], bool, re.Pattern[str]]] = [
    # (words one of which every match contains, whether case-insensitively, the pattern): a
    # pattern runs only over text that holds one of its words. Scanning for the patterns
    # themselves cost about 120 us on a one-call transcript (2 kB), every commit; looking for a
    # word costs well under a microsecond.
    # `Authorization: Bearer <token>`: 16+ token characters with a digit among them, so prose
    # ("the bearer significantly ...") is left alone.
    (("bearer",), True, re.compile(r"(?i)(\bbearer\s+)(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{16,}")),
    # OpenAI-style keys (sk-..., sk-proj-...), not words that merely contain "sk-" (risk-benefit).
    (("sk-",), False, re.compile(r"(?<![A-Za-z0-9])(sk-)[A-Za-z0-9_-]{16,}")),
    # key=..., api-key: ..., "api_key": "..." in URLs, headers and JSON bodies.
    # (Backslashes: inside a serialised transcript the quotes are escaped.)
    (("apikey", "api-key", "api_key", "accesstoken", "access-token", "access_token"), True,
     re.compile(r"""(?i)(\b(?:api[-_]?key|access[-_]?token|x-api-key)\\?["']?\s*[:=]\s*\\?["']?)[^\s"'&,;}\\]{12,}""")),
]
"""Case-insensitive words are looked for in `folded(text)`, where every character that a
case-insensitive pattern takes for one of their letters is that letter (tests check every code
point), so a text without the words cannot match the pattern."""

_FOLD = {0x131: "i", 0x17F: "s", 0x307: None}
"""What `str.lower` leaves apart that `re.IGNORECASE` takes for an ASCII letter: dotless i, long s,
and the combining dot that `"İ".lower()` puts after its i. (The Kelvin sign lowers to k itself.)"""


def folded(text: str) -> str:
    """`text` lowered, for finding the ASCII words of the case-insensitive patterns; nothing else reads it."""
    low = text.lower()
    return low if low.isascii() else low.translate(_FOLD)

_registered: set[str] = set()
_lock = threading.Lock()


def register_secret(value: str | None) -> None:
    """Remember a key this process uses, so its exact value is masked wherever it turns up."""
    if value and len(value) >= _MIN_SECRET:
        with _lock:
            _registered.add(value)


_cache: tuple[dict[Any, Any], frozenset[str], list[str]] | None = None
"""(the environment and the registered keys the list was computed from, the list): `redact` runs
several times per question, and scanning the environment with a regex each time cost about 0.5 ms
(a millisecond a commit)."""


def _environment() -> dict[Any, Any]:
    # CPython keeps the environment as a plain dict of bytes, which any change (monkeypatch.setenv,
    # os.environ[...] = ...) alters; elsewhere a copy of its items.
    env = getattr(os.environ, "_data", None)
    return env if isinstance(env, dict) else dict(os.environ)


def _secrets() -> list[str]:
    global _cache
    env = _environment()
    with _lock:
        # Compared, not copied, on every call: two dicts' `==` runs in C (about 1 us for 35
        # variables), where building a tuple of the items and a frozenset to compare cost about 5
        # us, three times a question. A copy is taken only when something changed.
        cached = _cache
        if cached is not None and cached[0] == env and cached[1] == _registered:
            return cached[2]
        snapshot, registered = dict(env), frozenset(_registered)
        values = set(registered)
    values.update(v for k, v in os.environ.items() if _SECRET_ENV.search(k) and len(v) >= _MIN_SECRET)
    # Longest first, so a key that contains another is masked whole; JSON-escaped forms too, since
    # transcripts are redacted as serialised text.
    out: set[str] = set()
    for v in values:
        out.add(v)
        out.add(json.dumps(v)[1:-1])
    result = sorted(out, key=len, reverse=True)
    with _lock:
        _cache = (snapshot, registered, result)
    return result


def redact(text: str) -> str:
    """`text` with every known secret value and every key- or token-shaped string masked."""
    if not text:
        return text
    for value in _secrets():
        if value in text:
            text = text.replace(value, MASK)
    lowered: str | None = None
    for words, any_case, pattern in _PATTERNS:
        if any_case and lowered is None:
            lowered = folded(text)
        within = lowered if any_case else text
        assert within is not None
        if not any(w in within for w in words):
            continue
        text = pattern.sub(_masked, text)
        lowered = None  # the text changed
    return text


def _masked(match: re.Match[str]) -> str:
    return match.group(1) + MASK


def redact_any(value: object) -> object:
    """`redact` over every string of a JSON-like value (dicts, lists, strings)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_any(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_any(v) for v in value]
    return value


URL_MASK = "%5BREDACTED%5D"
"""`MASK` as it stands inside a URL (percent-encoded, so the URL still parses)."""

_SECRET_PARAM = re.compile(r"(key|token|secret|pass|pwd|sig|auth|cred)", re.IGNORECASE)
"""URL query parameters whose value is a credential (`?key=`, `?api-key=`, `?sig=`, `?access_token=`)."""


def redact_url(url: str) -> str:
    """`url` with its password (`user:pw@`) and secret query values masked, then `redact`ed.

    A scenario's `base_url: "...?key=${OPENAI_API_KEY}"` holds the key itself once interpolated:
    run.json, the study's copy of it and the report would all show it otherwise."""
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:
        return redact(url)
    netloc = parts.netloc
    if password:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.split(':', 1)[0]}:{URL_MASK}@{host}"
    query = "&".join(f"{k}={URL_MASK}" if _SECRET_PARAM.search(k) and v else piece
                     for piece in parts.query.split("&") if piece
                     for k, _, v in [piece.partition("=")])
    text = redact(urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))
    return text.replace(MASK, URL_MASK)


def redact_urls(value: Any) -> Any:
    """`redact_url` over every string of a JSON-like value that looks like a URL."""
    if isinstance(value, str):
        return redact_url(value) if "://" in value else value
    if isinstance(value, dict):
        return {k: redact_urls(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_urls(v) for v in value]
    return value


_installed = False


def install_log_redaction() -> None:
    """Mask secrets in every log record of this process (medpanel's, Optuna's, httpx's ...).

    A record factory, not a handler filter: it covers handlers installed by any library, and a
    traceback attached to a record is formatted (and masked) here, before any handler sees it.
    """
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is logging's own problem to report
            return record
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(factory)
