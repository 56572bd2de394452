"""CLEAR's adjudication against the truth: which pathway was right when the verifier
overruled it, and the override guard's and challenge audit's outcomes by correctness.

Computed from the rows' digests (`analysis.digest`) of the `clear` pipeline's decision event
(always a transcript's last event: its `bundle.candidates`, `guard` and `audit`), for
multiple-choice rows only (free text has no letters to score). Rows without a decision event
(errors) are counted in `no_decision`, never dropped. The baselines (`direct`, `rag-*`,
`online`) run one pathway and adjudicate nothing: not here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from medpanel.agents.tables import Table
from medpanel.agents.types import score
from medpanel.experiments.analysis.digest import RowDigest, letters
from medpanel.experiments.analysis.trajectory import PATHWAYS
from medpanel.methods.clear.tables import AUDIT_OUTCOMES, GUARD_OUTCOMES

PATHWAY_COLUMNS = ["condition", "pathway", "n", "no_decision", "valid", "right", "agreed_with_final", "overruled",
                   "overruled_right", "overruled_to_right", "overruled_both_wrong", "final_right"]
NO_DECISION = "no_decision"
"""The outcome of a row that errored before its decision (counted, never dropped)."""
RULING_COLUMNS = ["condition", "mechanism", "outcome", "questions", "final_right", "final_wrong", "default_right",
                  "challenger_right", "neither_right"]


def _conditions(rows: Sequence[RowDigest], conditions: Sequence[str] | None) -> list[str]:
    seen = list(dict.fromkeys(d.outcome.condition for d in rows))
    given = list(conditions or [])
    return [c for c in given if c in seen] + [c for c in seen if c not in given]


def _adjudicated(digests: Iterable[RowDigest]) -> list[RowDigest]:
    """The multiple-choice rows of the conditions that adjudicate (any row with a decision; the
    condition's rows without one errored before it)."""
    mcq = [d for d in digests if d.mcq]
    adjudicated = {d.outcome.condition for d in mcq if d.decision is not None}
    return [d for d in mcq if d.outcome.condition in adjudicated]


def pathway_rows(digests: Iterable[RowDigest], conditions: Sequence[str] | None = None, *,
                 scoring: str = "exact_set") -> list[list[Any]]:
    """Per condition and pathway: how the candidate compares with the final answer and the gold.

    overruled = the pathway had a valid answer and the final answer differs (an invalid final
    answer included); overruled_right = ... and the pathway was right (the final was then wrong);
    overruled_to_right = the pathway was wrong and the final right; overruled_both_wrong = neither.
    """
    rows = _adjudicated(digests)
    out: list[list[Any]] = []
    for cond in _conditions(rows, conditions):
        mine = [d for d in rows if d.outcome.condition == cond]
        decided = [(d, dec) for d in mine if (dec := d.decision) is not None]
        missing = len(mine) - len(decided)
        for p in PATHWAYS:
            c: dict[str, int] = defaultdict(int)
            for d, dec in decided:
                gold = letters(d.outcome.gold)
                final = letters(d.outcome.answer)
                final_right = d.outcome.correct
                cand = dec.candidates[p]
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


def pathway_table(digests: Iterable[RowDigest], conditions: Sequence[str] | None = None, *,
                  scoring: str = "exact_set") -> Table | None:
    rows = pathway_rows(digests, conditions, scoring=scoring)
    if not rows:
        return None
    return Table("CLEAR pathways against the final answer", PATHWAY_COLUMNS, rows,
                 note="n = multiple-choice questions with a decision (no_decision: errors before it). overruled = "
                      "the pathway's valid answer differs from the final one; overruled_right = the pathway was "
                      "right and the final answer wrong (a loss to adjudication); overruled_to_right = the pathway "
                      "was wrong and the final right; overruled_both_wrong = neither.")


def ruling_rows(digests: Iterable[RowDigest], conditions: Sequence[str] | None = None, *,
                scoring: str = "exact_set") -> list[list[Any]]:
    """Per condition, mechanism (guard, audit) and outcome: the final answer's correctness, and
    whether the default (the consensus it protects) or the challenger (the dynamic answer) was right."""
    rows = _adjudicated(digests)
    out: list[list[Any]] = []
    for cond in _conditions(rows, conditions):
        for mechanism, known in (("guard", GUARD_OUTCOMES), ("audit", AUDIT_OUTCOMES)):
            tally: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
            for d in rows:
                if d.outcome.condition != cond:
                    continue
                dec = d.decision
                rec = None if dec is None else dec.guard if mechanism == "guard" else dec.audit
                outcome = NO_DECISION if rec is None else rec.outcome
                gold = letters(d.outcome.gold)
                t = tally[outcome]
                t["questions"] += 1
                t["final_right" if d.outcome.correct else "final_wrong"] += 1
                if rec is None or outcome in ("not_triggered", NO_DECISION):
                    continue
                default_right = score(rec.default, gold, scoring)
                challenger_right = score(rec.challenger, gold, scoring)
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


def ruling_table(digests: Iterable[RowDigest], conditions: Sequence[str] | None = None, *,
                 scoring: str = "exact_set") -> Table | None:
    rows = ruling_rows(digests, conditions, scoring=scoring)
    if not rows:
        return None
    return Table("CLEAR guard and audit outcomes by correctness", RULING_COLUMNS, rows,
                 note="default = the answer the mechanism protects (guard: the parametric=local consensus or the "
                      "three-way default; audit: the parametric=local consensus); challenger = the dynamic "
                      "pathway's answer; no_decision = errors before the decision. A rejected override whose "
                      "challenger was right is a missed correction; a granted one whose default was right is a loss.")
