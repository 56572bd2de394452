"""CLEAR's adjudication against the truth: which pathway was right when the verifier
overruled it, and the override guard's and challenge audit's outcomes by correctness.

Computed from the `clear` pipeline's decision event (always a transcript's last event: its
`bundle.candidates`, `guard` and `audit`), for multiple-choice rows only (free text has no letters
to score). Rows without a decision event (errors) are counted in `no_decision`, never dropped.
The baselines (`direct`, `rag-*`, `online`) run one pathway and adjudicate nothing: not here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from medpanel.agents.clear.tables import AUDIT_OUTCOMES, GUARD_OUTCOMES
from medpanel.agents.tables import Table
from medpanel.agents.types import score
from medpanel.experiments.analysis.trajectory import PATHWAYS

PATHWAY_COLUMNS = ["condition", "pathway", "n", "no_decision", "valid", "right", "agreed_with_final", "overruled",
                   "overruled_right", "overruled_to_right", "overruled_both_wrong", "final_right"]
NO_DECISION = "no_decision"
"""The outcome of a row that errored before its decision (counted, never dropped)."""
RULING_COLUMNS = ["condition", "mechanism", "outcome", "questions", "final_right", "final_wrong", "default_right",
                  "challenger_right", "neither_right"]


def _decision(doc: Mapping[str, Any]) -> Mapping[str, Any] | None:
    events = doc.get("events") or []
    last = events[-1] if events else None
    if last and last.get("kind") == "decision" and isinstance((last.get("data") or {}).get("bundle"), dict):
        return dict(last.get("data") or {})
    return None


def _letters(answer: Any) -> tuple[str, ...]:
    if not answer:
        return ()
    return tuple(sorted({str(a) for a in answer})) if isinstance(answer, list | tuple) else (str(answer),)


def _mcq(doc: Mapping[str, Any]) -> bool:
    return bool((doc.get("question") or {}).get("options")) and bool(doc.get("gold"))


def _conditions(docs: Sequence[Mapping[str, Any]], conditions: Sequence[str] | None) -> list[str]:
    seen = list(dict.fromkeys(str(d.get("condition", "")) for d in docs))
    given = list(conditions or [])
    return [c for c in given if c in seen] + [c for c in seen if c not in given]


def pathway_rows(docs: Iterable[Mapping[str, Any]], conditions: Sequence[str] | None = None, *,
                 scoring: str = "exact_set") -> list[list[Any]]:
    """Per condition and pathway: how the candidate compares with the final answer and the gold.

    overruled = the pathway had a valid answer and the final answer differs (an invalid final
    answer included); overruled_right = ... and the pathway was right (the final was then wrong);
    overruled_to_right = the pathway was wrong and the final right; overruled_both_wrong = neither.
    """
    mcq = [d for d in docs if _mcq(d)]
    # A condition adjudicates when any of its rows has a decision; its rows without one errored.
    adjudicated = {d.get("condition") for d in mcq if _decision(d) is not None}
    rows = [d for d in mcq if d.get("condition") in adjudicated]
    out: list[list[Any]] = []
    for cond in _conditions(rows, conditions):
        mine = [d for d in rows if d.get("condition") == cond]
        decided = [(d, dec) for d in mine if (dec := _decision(d)) is not None]
        missing = len(mine) - len(decided)
        for p in PATHWAYS:
            c: dict[str, int] = defaultdict(int)
            for d, dec in decided:
                gold = _letters(d.get("gold"))
                final = _letters(d.get("answer"))
                final_right = bool(d.get("correct"))
                cand = _letters(((dec["bundle"].get("candidates") or {}).get(p) or {}).get("answer"))
                c["final_right"] += final_right
                if not cand:
                    continue
                right = score(cand, gold, scoring)
                c["valid"] += 1
                c["right"] += right
                if cand == final:
                    c["agreed"] += 1
                    continue
                c["overruled"] += 1
                if right:
                    c["overruled_right"] += 1
                elif final_right:
                    c["overruled_to_right"] += 1
                else:
                    c["overruled_both_wrong"] += 1
            out.append([cond, p, len(decided), missing, c["valid"], c["right"], c["agreed"], c["overruled"],
                        c["overruled_right"], c["overruled_to_right"], c["overruled_both_wrong"], c["final_right"]])
    return out


def pathway_table(docs: Iterable[Mapping[str, Any]], conditions: Sequence[str] | None = None, *,
                  scoring: str = "exact_set") -> Table | None:
    rows = pathway_rows(docs, conditions, scoring=scoring)
    if not rows:
        return None
    return Table("CLEAR pathways against the final answer", PATHWAY_COLUMNS, rows,
                 note="n = multiple-choice questions with a decision (no_decision: errors before it). overruled = "
                      "the pathway's valid answer differs from the final one; overruled_right = the pathway was "
                      "right and the final answer wrong (a loss to adjudication); overruled_to_right = the pathway "
                      "was wrong and the final right; overruled_both_wrong = neither.")


def ruling_rows(docs: Iterable[Mapping[str, Any]], conditions: Sequence[str] | None = None, *,
                scoring: str = "exact_set") -> list[list[Any]]:
    """Per condition, mechanism (guard, audit) and outcome: the final answer's correctness, and
    whether the default (the consensus it protects) or the challenger (the dynamic answer) was right."""
    mcq = [d for d in docs if _mcq(d)]
    adjudicated = {d.get("condition") for d in mcq if _decision(d) is not None}
    rows = [d for d in mcq if d.get("condition") in adjudicated]
    out: list[list[Any]] = []
    for cond in _conditions(rows, conditions):
        for mechanism, known in (("guard", GUARD_OUTCOMES), ("audit", AUDIT_OUTCOMES)):
            tally: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
            for d in rows:
                if d.get("condition") != cond:
                    continue
                dec = _decision(d)
                rec = (dec or {}).get(mechanism) or {}
                outcome = str(rec.get("outcome", "not_triggered")) if dec is not None else NO_DECISION
                gold = _letters(d.get("gold"))
                t = tally[outcome]
                t["questions"] += 1
                t["final_right" if d.get("correct") else "final_wrong"] += 1
                if outcome in ("not_triggered", NO_DECISION):
                    continue
                default_right = score(_letters(rec.get("default")), gold, scoring)
                challenger_right = score(_letters(rec.get("challenger")), gold, scoring)
                t["default_right"] += default_right
                t["challenger_right"] += challenger_right
                t["neither_right"] += not (default_right or challenger_right)
            for outcome in [*known, *sorted(set(tally) - {*known, NO_DECISION}), NO_DECISION]:
                if outcome not in tally:
                    continue
                t = tally[outcome]
                triggered = outcome not in ("not_triggered", NO_DECISION)
                out.append([cond, mechanism, outcome, t["questions"], t["final_right"], t["final_wrong"],
                            t["default_right"] if triggered else "-", t["challenger_right"] if triggered else "-",
                            t["neither_right"] if triggered else "-"])
    return out


def ruling_table(docs: Iterable[Mapping[str, Any]], conditions: Sequence[str] | None = None, *,
                 scoring: str = "exact_set") -> Table | None:
    rows = ruling_rows(docs, conditions, scoring=scoring)
    if not rows:
        return None
    return Table("CLEAR guard and audit outcomes by correctness", RULING_COLUMNS, rows,
                 note="default = the answer the mechanism protects (guard: the parametric=local consensus or the "
                      "three-way default; audit: the parametric=local consensus); challenger = the dynamic "
                      "pathway's answer; no_decision = errors before the decision. A rejected override whose "
                      "challenger was right is a missed correction; a granted one whose default was right is a loss.")
