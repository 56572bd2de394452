"""CLEAR's report tables, computed from the result rows' summaries as `ClearSummary` reads them.

- Route distribution per condition (final routes, heuristic fallbacks, accuracy).
- Override guard and challenge audit outcomes.
- Follow-up search (the paper's Table 5): searches triggered per dataset, accepted revisions and
  the acceptance rate (accepted revisions / searches triggered).
- Pathway accuracy and agreement patterns (MCQ): how often each source alone was right.
- Free-text rubric scores, where rows carry one; Table 3 (MedRBench and HealthBench in the paper's
  shape) and HealthBench's scores by theme and axis (`table3.py`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from medpanel.agents.tables import OVERALL, ResultRow, Table, TableSpec
from medpanel.methods.clear.summary import ClearSummary
from medpanel.methods.clear.table3 import healthbench_tag_table, table3

Summaries = dict[int, ClearSummary]

ROUTES = ("consensus", "keep_parametric", "keep_local", "accept_dynamic", "needs_more_search")
GUARD_OUTCOMES = ("not_triggered", "granted", "rejected_no_high", "rejected_no_followup", "rejected_conditions",
                  "rejected_judge_invalid")
AUDIT_OUTCOMES = ("not_triggered", "reopened", "kept_below_threshold", "kept_not_supported", "kept_no_followup",
                  "kept_judge_invalid")
PATTERNS = ("all_agree", "param_local_vs_dynamic", "local_dynamic_vs_param", "param_dynamic_vs_local",
            "three_way_split", "partial")


def _pct(k: float, n: int) -> float:
    return round(100.0 * k / n, 1) if n else 0.0


def _summaries(rows: Sequence[ResultRow]) -> Summaries:
    """Each row's summary read once, as CLEAR wrote it."""
    return {id(r): ClearSummary.view(r.summary) for r in rows}


def _accuracy(sel: Sequence[ResultRow]) -> float | str:
    """Accuracy over the MCQ rows; free-text rows (no gold) have none."""
    mcq = [r for r in sel if r.gold]
    return _pct(sum(r.correct for r in mcq), len(mcq)) if mcq else "-"


def _clear_rows(rows: Sequence[ResultRow], s: Summaries, cond: str) -> list[ResultRow]:
    return [r for r in rows if r.condition == cond and not r.error and s[id(r)].adjudicated]


def route_table(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    s = _summaries(rows)
    out = []
    for cond in conditions:
        sel = _clear_rows(rows, s, cond)
        if not sel:
            continue
        routes = Counter(s[id(r)].route for r in sel)
        fallbacks = sum(bool(s[id(r)].fallback_used) for r in sel)
        out.append([cond, len(sel), *(routes.get(z, 0) for z in ROUTES), fallbacks, _accuracy(sel)])
    if not out:
        return None
    return Table("CLEAR route distribution", ["condition", "n", *ROUTES, "heuristic_fallback", "accuracy_%"], out,
                 note="Final route per question after the override guard and the challenge audit; "
                      "heuristic_fallback counts questions where an invalid or inconsistent verifier reply was "
                      "replaced by the documented heuristic at least once.")


def guard_audit_table(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    s = _summaries(rows)
    out = []
    for cond in conditions:
        sel = _clear_rows(rows, s, cond)
        if not sel:
            continue
        for mechanism, known in (("guard", GUARD_OUTCOMES), ("audit", AUDIT_OUTCOMES)):
            counts = Counter(str((s[id(r)].guard if mechanism == "guard" else s[id(r)].audit) or "not_triggered")
                             for r in sel)
            for outcome in [*known, *sorted(set(counts) - set(known))]:
                if counts.get(outcome):
                    out.append([cond, mechanism, outcome, counts[outcome], _pct(counts[outcome], len(sel))])
    if not out:
        return None
    return Table("CLEAR guard and audit outcomes", ["condition", "mechanism", "outcome", "questions", "share_%"], out,
                 note="guard: accept_dynamic against a parametric=local consensus or a three-way split; a follow-up "
                      "runs only with n_high >= 1 and the override needs all five follow-up conditions. audit: "
                      "parametric=local != dynamic not accepted; reopened only with n_high >= 1 or n_medium >= 2 "
                      "in the follow-up and clear support.")


def followup_table(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    s = _summaries(rows)
    datasets = sorted({r.dataset for r in rows})
    out = []
    for cond in conditions:
        if not _clear_rows(rows, s, cond):
            continue
        for ds in [*datasets, OVERALL]:
            sel = [r for r in _clear_rows(rows, s, cond) if ds == OVERALL or r.dataset == ds]
            if not sel:
                continue
            searches = sum((s[id(r)].follow_ups or 0) for r in sel)
            revisions = sum((s[id(r)].revisions or 0) for r in sel)
            out.append([cond, ds, len(sel), searches, sum(1 for r in sel if s[id(r)].follow_ups), revisions,
                        _pct(revisions, searches), _accuracy(sel)])
    if not out:
        return None
    return Table("CLEAR follow-up search", ["condition", "dataset", "n", "searches_triggered", "questions_searched",
                                            "accepted_revisions", "acceptance_rate_%", "accuracy_%"], out,
                 note="searches_triggered = targeted follow-up searches (guard, audit and needs_more_search); "
                      "accepted_revisions = answer changes, each credited to one follow-up (guard granted, audit "
                      "reopened, or the answer standing after the next verification differs from the preliminary "
                      "one); acceptance rate = accepted_revisions / searches_triggered.")


def _right(answer: Any, gold: set[str]) -> bool:
    return bool(answer) and set(answer) == gold


def pathway_table(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    s = _summaries(rows)
    out = []
    for cond in conditions:
        sel = [r for r in _clear_rows(rows, s, cond) if r.gold and s[id(r)].candidates is not None]
        if not sel:
            continue
        n = len(sel)
        acc = []
        for pathway in ("parametric", "local", "dynamic"):
            k = sum(_right((s[id(r)].candidates or {}).get(pathway), set(r.gold.split(","))) for r in sel)
            acc.append(_pct(k, n))
        patterns = Counter(s[id(r)].agreement or "partial" for r in sel)
        out.append([cond, n, *acc, _pct(sum(r.correct for r in sel), n), *(patterns.get(p, 0) for p in PATTERNS)])
    if not out:
        return None
    return Table("CLEAR pathway accuracy and agreement",
                 ["condition", "n", "parametric_%", "local_%", "dynamic_%", "clear_%", *PATTERNS], out,
                 note="Each pathway's own candidate scored as an exact set; patterns count how the three candidates "
                      "agreed before adjudication (partial = a pathway gave no valid answer).")


def freetext_table(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    """Rubric scores over every free-text row of a graded dataset: a row with no response, no valid
    grade or an error scores 0 and is counted in n_missing (dropping them would reward a
    condition for failing on the hard tasks)."""
    s = _summaries(rows)
    graded_ds = {r.dataset for r in rows if s[id(r)].rubric or s[id(r)].rubric_score is not None}
    datasets = sorted(graded_ds)
    out = []
    for cond in conditions:
        for ds in [*datasets, OVERALL]:
            sel = [r for r in rows if r.condition == cond and not r.gold and r.dataset in graded_ds
                   and (ds == OVERALL or r.dataset == ds)]
            if not sel:
                continue
            scores = [float(x) for x in (s[id(r)].rubric_score for r in sel) if x is not None]
            out.append([cond, ds, len(sel), len(scores), len(sel) - len(scores),
                        round(min(1.0, max(0.0, sum(scores) / len(sel))), 4), sum(1 for r in sel if r.invalid),
                        sum(1 for r in sel if r.error)])
    if not out:
        return None
    return Table("Free-text rubric scores", ["condition", "dataset", "n", "graded", "n_missing", "mean_score",
                                            "no_response", "errors"], out,
                 note="A task's score = points of met rubric items / positive points (a met negative item "
                      "subtracts; MedRBench: 1 correct, 0 wrong), graded by an LLM judge; mean_score is the mean "
                      "over all n tasks clipped to [0, 1] (HealthBench's rule). A task with no response, no valid "
                      "grade or an error scores 0 (n_missing of them). The accuracy table's `correct` does not "
                      "apply to free text.")


CLEAR_TABLES = tuple(TableSpec(build, late=True)
                     for build in (route_table, guard_audit_table, followup_table, pathway_table, freetext_table,
                                   table3, healthbench_tag_table))
