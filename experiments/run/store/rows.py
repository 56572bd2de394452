"""A result row as readers see it (`Row`), and the row of the stored table's values (`row_of`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Row:
    condition: str
    dataset: str
    qid: str
    repeat: int
    answer: str
    gold: str
    correct: bool
    invalid: bool
    error: str | None
    error_kind: str | None
    calls: int
    logical_calls: int
    tokens: int
    latency_s: float
    summary: dict[str, Any]
    transcript: str
    cost_usd: float = 0.0
    cached_tokens: int = 0
    """Prompt tokens the endpoint's prompt cache served (calls sent, cache hits excluded)."""
    cache_saved_usd: float = 0.0
    """What those cost less than ordinary input, at the model's `cached_input` price."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.dataset, self.qid)

    @property
    def status(self) -> str:
        return "error" if self.error else "invalid" if self.invalid else "correct" if self.correct else "wrong"


def row_of(v: dict[str, Any]) -> Row:
    summary = v["summary"]
    return Row(condition=v["condition"], dataset=v["dataset"], qid=v["qid"], repeat=int(v["repeat"]),
               answer=v["answer"], gold=v["gold"], correct=bool(v["correct"]), invalid=bool(v["invalid"]),
               error=v["error"], error_kind=v["error_kind"], calls=int(v["calls"]),
               logical_calls=int(v["logical_calls"]), tokens=int(v["tokens"]), latency_s=float(v["latency_s"]),
               summary=json.loads(summary) if isinstance(summary, str) else summary, transcript=v["transcript"],
               cost_usd=float(v.get("cost_usd") or 0.0), cached_tokens=int(v.get("cached_tokens") or 0),
               cache_saved_usd=float(v.get("saved_usd") or 0.0))
