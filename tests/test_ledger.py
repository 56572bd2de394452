"""Cost per mechanism on a hand-computed set of transcript events."""

from __future__ import annotations

import math

import pytest

from medpanel.agents.types import TranscriptEvent, Usage
from medpanel.experiments.analysis.inference.ledger import (
    compact_ledger,
    condition_totals,
    ledger,
    ledger_from_compact,
    usd_per_extra_correct,
    usd_per_extra_correct_rows,
)
from medpanel.experiments.run.tracking.budget import Price, event_cost

PRICES = {"gpt-4o-mini": Price(input=0.15, output=0.60)}


def _call(role: str, step: str, pt: int, ct: int, *, hit: bool = False, attempts: int = 1, model: str = "gpt-4o-mini",
          error: str | None = None) -> TranscriptEvent:
    return TranscriptEvent(kind="call", role=role, agent=role, step=step, usage=Usage(prompt_tokens=pt,
                           completion_tokens=ct), cache_hit=hit, attempts=attempts, model=model, error=error)


def _events() -> dict[str, list]:
    c1 = [
        _call("specialist", "initial", 1000, 200),
        _call("specialist", "initial", 1000, 200, hit=True),  # answered by the cache: free
        _call("challenger", "critique", 3000, 500, attempts=2),  # one re-ask
        _call("knowledge_gate", "gate", 800, 50),
        TranscriptEvent(kind="note", role="pipeline", agent="pipeline", step="early_stop"),  # not a call
        _call("moderator", "final", 500, 20, model="unpriced-model"),
        _call("recruiter", "recruit", 0, 0, error="timeout: no reply"),
    ]
    c0 = [_call("specialist", "initial", 1000, 200).model_dump(mode="json")]  # as read from a transcript file
    return {"c1r0k1": c1, "c0r0": c0}


def test_ledger_lines_by_hand() -> None:
    lines = {(ln.condition, ln.role, ln.step): ln for ln in ledger(_events(), PRICES)}
    spec = lines["c1r0k1", "specialist", "initial"]
    # Sent: 1,000 x 0.15 + 200 x 0.60 = 270 -> $0.00027; the cache hit saves the same.
    assert (spec.calls, spec.prompt_tokens, spec.completion_tokens) == (1, 1000, 200)
    assert spec.usd == pytest.approx(0.00027) and spec.usd_saved == pytest.approx(0.00027)
    assert (spec.cache_hits, spec.cache_prompt_tokens, spec.cache_completion_tokens) == (1, 1000, 200)
    ch = lines["c1r0k1", "challenger", "critique"]
    assert ch.calls == 2 and ch.usd == pytest.approx((3000 * 0.15 + 500 * 0.60) / 1e6)  # 0.00075
    assert lines["c1r0k1", "knowledge_gate", "gate"].usd == pytest.approx((800 * 0.15 + 50 * 0.60) / 1e6)
    mod = lines["c1r0k1", "moderator", "final"]
    assert (mod.calls, mod.usd, mod.unpriced, mod.tokens) == (1, 0.0, 1, 520)
    rec = lines["c1r0k1", "recruiter", "recruit"]
    assert (rec.calls, rec.failed, rec.usd) == (1, 1, 0.0)
    assert ("c1r0k1", "pipeline", "early_stop") not in lines
    assert lines["c0r0", "specialist", "initial"].usd == pytest.approx(0.00027)  # JSON dicts read the same
    totals = condition_totals(lines.values())
    t = totals["c1r0k1"]
    assert (t.calls, t.cache_hits, t.failed, t.unpriced) == (6, 1, 1, 1)
    assert t.usd == pytest.approx(0.00027 + 0.00075 + 0.00015)
    assert t.as_row()["tokens"] == 1200 + 3500 + 850 + 520


def test_ledger_total_is_the_runs_own_cost() -> None:
    """The ledger prices exactly as the run's budget does (experiments/run/budget.event_cost)."""
    events = _events()["c1r0k1"]
    total = condition_totals(ledger({"x": events}, PRICES))["x"]
    assert total.usd == pytest.approx(sum(event_cost(e, PRICES) for e in events if e.kind == "call"))
    assert total.calls == sum(e.attempts for e in events if e.kind == "call" and not e.cache_hit)


def test_compact_ledger_kept_with_rows_gives_the_same_ledger() -> None:
    events = _events()
    per_question = {c: [compact_ledger(evs[:3]), compact_ledger(evs[3:])] for c, evs in events.items()}
    assert compact_ledger(events["c1r0k1"][:1]) == {"specialist\tinitial\tgpt-4o-mini": [1, 1000, 200, 0, 0, 0, 0]}
    by_events = {(ln.condition, ln.role, ln.step): ln for ln in ledger(events, PRICES)}
    by_rows = {(ln.condition, ln.role, ln.step): ln for ln in ledger_from_compact(per_question, PRICES)}
    assert by_rows.keys() == by_events.keys()
    for key, ln in by_events.items():
        other = by_rows[key]
        assert other.as_row() == pytest.approx(ln.as_row()), key


def test_usd_per_extra_correct_by_hand() -> None:
    # b spends $3.00 more and gets 12 more right: $0.25 per extra correct answer.
    assert usd_per_extra_correct(1.0, 30, 4.0, 42) == (pytest.approx(0.25), "")
    value, note = usd_per_extra_correct(1.0, 30, 4.0, 28)
    assert math.isnan(value) and note == "b is not more accurate (-2 correct): no extra correct answer to price"
    assert usd_per_extra_correct(2.0, 10, 1.0, 14) == (pytest.approx(-0.25), "b is more accurate and no dearer")


class _Row:
    def __init__(self, condition: str, q: int, correct: bool, cost: float, repeat: int = 0) -> None:
        self.condition, self.q, self.correct, self.cost_usd, self.repeat = condition, q, correct, cost, repeat

    @property
    def key(self) -> tuple[str, int]:
        return ("ds", self.q)


def test_usd_per_extra_correct_on_common_questions() -> None:
    rows = [_Row("a", q, q < 2, 0.01) for q in range(4)] + [_Row("b", q, q < 3, 0.03) for q in range(4)]
    rows.append(_Row("b", 99, True, 5.0))  # only b answered it: not paired, left out
    # 4 common questions: a $0.04 / 2 right, b $0.12 / 3 right -> $0.08 per extra correct answer.
    assert usd_per_extra_correct_rows(rows, "a", "b") == (pytest.approx(0.08), "")
    assert math.isnan(usd_per_extra_correct_rows(rows, "a", "zz")[0])
