"""The settings a reader must know before trusting a run's tables: the cache mode and the
small-model accommodations in force, as one short header for the terminal report and the viewer."""

from __future__ import annotations

from medpanel.experiments.run.store.records import RunRecord

CACHE_MEANING = {
    "run": "identical requests answered once across conditions: common random numbers",
    "condition": "one cache namespace per condition: every condition sends its own requests",
    "off": "no cache: every request sent",
}

_LIMITS = (
    ("context_window", "context window {} tokens", "whole history"),
    ("passage_chars", "passages cut at {} chars", "full passages"),
    ("verifier_passage_chars", "verifier passages cut at {} chars", None),
    ("max_string_chars", "free-text fields capped at {} chars", "no string cap"),
)


def accommodations_text(record: RunRecord) -> str:
    acc = record.accommodations
    if acc is None:
        return "not recorded (run made before medpanel recorded them)"
    parts = []
    for key, bounded, unbounded in _LIMITS:
        if key not in acc:
            continue
        value = acc[key]
        if value is not None:
            parts.append(bounded.format(value))
        elif unbounded is not None:
            parts.append(unbounded)
    return f"{acc.get('backend', '?')} backend: " + ", ".join(parts)


def header_lines(record: RunRecord) -> list[str]:
    mode = record.cache_mode
    return [f"cache: {mode} ({CACHE_MEANING.get(mode, 'unknown mode')})",
            f"accommodations: {accommodations_text(record)}"]
