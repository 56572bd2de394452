"""CLEAR's result tables in the paper's shape: rows are its methods, columns its benchmarks.

A run over CLEAR's benchmark suite (`scenarios/clear_benchmarks.yaml`, one `dataset.parts` entry
per benchmark) names each question's dataset `<benchmark>` or `<benchmark>.<subset>`
(`nejm-qa.internal_medicine`, `mmlu.anatomy`); these builders read the benchmark from that name
and build a table only where the run holds one of its benchmarks and a CLEAR condition.

- Table 1: MedQA and PubMedQA accuracy.
- Table 2: NEJM-QA by specialty, exact-set accuracy (the paper's rule), any-of beside it.
- Table 3: the free-text benchmarks (MedRBench, HealthBench): built with the free-text grading.
- Table 4: the source ablation (direct, BM25, online, CLEAR) over every multiple-choice benchmark.
- Table 5: follow-up search usage per benchmark.
- Table 8: MedBullets, MedExQA, AfriMed-QA, MMLU and MMLU-Pro.
- Table 9: NEJM-QA internal medicine, naming the web backend the searching conditions used, and
  saying so plainly when no live one was configured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from medpanel.agents.tables import OVERALL, ResultRow, Table, TableSpec
from medpanel.methods.clear.summary import ClearSummary

METHODS = {"direct": "Direct (parametric only)", "rag-bm25": "MedRAG (BM25)", "rag-dense": "MedRAG (dense)",
           "online": "Online search only", "clear-default": "CLEAR", "clear-dual": "CLEAR (dual model)",
           "clear-qpis": "CLEAR (query planning)", "clear-no-followup": "CLEAR without follow-up"}
"""Condition -> the paper's name for the method (a row's label); an unknown condition keeps its slug."""

MCQ_BENCHMARKS = ("medqa", "pubmedqa", "nejm-qa", "medbullets", "medexqa", "afrimedqa", "mmlu", "mmlu-pro")
TABLE1 = ("medqa", "pubmedqa")
TABLE8 = ("medbullets", "medexqa", "afrimedqa", "mmlu", "mmlu-pro")
NEJM = "nejm-qa"
NEJM_SPECIALTIES = ("internal_medicine", "general_surgery", "pediatrics", "obgyn", "psychiatry")
LIVE_SOURCES = ("tavily",)
"""Web sources that search the live web; `snapshot` is the offline web."""


def benchmark_of(dataset: str) -> tuple[str, str]:
    """`nejm-qa.internal_medicine` -> (`nejm-qa`, `internal_medicine`); `medqa` -> (`medqa`, ``)."""
    head, _, sub = dataset.partition(".")
    return head, sub


def _letters(value: Any) -> set[str]:
    return {x.strip() for x in str(value or "").split(",") if x.strip()}


def exact_set(r: ResultRow) -> bool:
    """The answer's letters equal the gold's (CLEAR's NEJM-QA rule), read from the row itself."""
    answer = getattr(r, "answer", None)
    if answer is None or r.error:
        return bool(r.correct) if answer is None else False
    got = _letters(answer)
    return bool(got) and got == _letters(r.gold)


def any_of(r: ResultRow) -> bool:
    """Any answer letter is gold (the CLEAR authors' code)."""
    answer = getattr(r, "answer", None)
    if answer is None or r.error:
        return bool(r.correct) if answer is None else False
    return bool(_letters(answer) & _letters(r.gold))


def _acc(sel: Sequence[ResultRow], rule: Any = exact_set) -> float | str:
    return round(100.0 * sum(rule(r) for r in sel) / len(sel), 1) if sel else "-"


def _mcq(rows: Sequence[ResultRow]) -> list[ResultRow]:
    return [r for r in rows if r.gold and benchmark_of(r.dataset)[0] in MCQ_BENCHMARKS]


def _has_clear(rows: Sequence[ResultRow]) -> bool:
    return any(ClearSummary.view(r.summary).mode == "clear" for r in rows)


def _method(cond: str) -> str:
    return METHODS.get(cond, cond)


def _grid(rows: Sequence[ResultRow], conditions: list[str], benchmarks: Sequence[str], title: str,
          note: str, any_of_beside: Sequence[str] = ()) -> Table | None:
    """Accuracy per method (rows) and benchmark (columns), with n and the mean over the benchmarks present.
    A benchmark of `any_of_beside` gets a `<benchmark>_any_of` column after its exact-set one (not in the mean)."""
    rows = _mcq(rows)
    present = [b for b in benchmarks if any(benchmark_of(r.dataset)[0] == b for r in rows)]
    if not present or not _has_clear(rows):
        return None
    columns = [c for b in present for c in ([b, f"{b}_any_of"] if b in any_of_beside else [b])]
    out = []
    for cond in conditions:
        mine = [r for r in rows if r.condition == cond]
        if not mine:
            continue
        cells = {b: _acc([r for r in mine if benchmark_of(r.dataset)[0] == b]) for b in present}
        cells |= {f"{b}_any_of": _acc([r for r in mine if benchmark_of(r.dataset)[0] == b], any_of)
                  for b in present if b in any_of_beside}
        numbers = [c for b in present if isinstance(c := cells[b], float)]
        out.append([_method(cond), *(cells[c] for c in columns),
                    round(sum(numbers) / len(numbers), 1) if numbers else "-",
                    len([r for r in mine if benchmark_of(r.dataset)[0] in present])])
    return Table(title, ["method", *columns, "mean", "n"], out, note=note) if out else None


def table1(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    return _grid(rows, conditions, TABLE1, "CLEAR Table 1: MedQA and PubMedQA (accuracy %)",
                 "Accuracy % per method; mean = the unweighted mean of the benchmark columns.")


def table8(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    return _grid(rows, conditions, TABLE8, "CLEAR Table 8: additional benchmarks (accuracy %)",
                 "MMLU: its six medical subjects pooled; MMLU-Pro: its health category (ten options, A-J); "
                 "MedExQA: its five specialties pooled; AfriMed-QA: its multiple-choice items, each asked "
                 "select-all and counted only as its exact set of correct options (the publisher marks no item as "
                 "several-answer); afrimedqa_any_of credits any correct option, for comparison (not in the mean).",
                 any_of_beside=("afrimedqa",))


def table4(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    ablation = [c for c in conditions if c in ("direct", "rag-bm25", "online", "clear-default")]
    if len(ablation) < 2:
        return None
    return _grid(rows, ablation, MCQ_BENCHMARKS, "CLEAR Table 4: knowledge-source ablation (accuracy %)",
                 "Direct = parametric knowledge only; MedRAG (BM25) = the local corpus; Online = the web source "
                 "alone; CLEAR = all three pathways adjudicated. NEJM-QA and AfriMed-QA scored as exact sets.")


def table2(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    nejm = [r for r in _mcq(rows) if benchmark_of(r.dataset)[0] == NEJM]
    if not nejm or not _has_clear(rows):
        return None
    found = {benchmark_of(r.dataset)[1] for r in nejm}
    specialties = [s for s in NEJM_SPECIALTIES if s in found] + sorted(found - set(NEJM_SPECIALTIES))
    out = []
    for cond in conditions:
        mine = [r for r in nejm if r.condition == cond]
        if mine:
            out.append([_method(cond), *(_acc([r for r in mine if benchmark_of(r.dataset)[1] == s])
                                         for s in specialties), _acc(mine), _acc(mine, any_of), len(mine)])
    return Table("CLEAR Table 2: NEJM-QA by specialty (exact-set accuracy %)",
                 ["method", *specialties, OVERALL, "overall_any_of", "n"], out,
                 note="An item with several correct answers counts only when the answer is exactly its set "
                      "(CLEAR's rule); overall_any_of credits any gold letter (the authors' code), for comparison.")


def table5(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    mcq = _mcq(rows)
    out = []
    for cond in conditions:
        mine = [r for r in mcq if r.condition == cond and not r.error]
        views = {id(r): ClearSummary.view(r.summary) for r in mine}
        mine = [r for r in mine if views[id(r)].mode == "clear" and views[id(r)].adjudicated]
        for b in [*MCQ_BENCHMARKS, OVERALL]:
            sel = [r for r in mine if b == OVERALL or benchmark_of(r.dataset)[0] == b]
            if not sel:
                continue
            searches = sum(views[id(r)].follow_ups or 0 for r in sel)
            revisions = sum(views[id(r)].revisions or 0 for r in sel)
            out.append([_method(cond), b, len(sel), searches, sum(1 for r in sel if views[id(r)].follow_ups),
                        revisions, round(100.0 * revisions / searches, 1) if searches else 0.0])
    if not out:
        return None
    return Table("CLEAR Table 5: follow-up search usage",
                 ["method", "benchmark", "n", "searches_triggered", "questions_searched", "accepted_revisions",
                  "acceptance_rate_%"], out,
                 note="Targeted follow-up searches (override guard, challenge audit, needs_more_search) and the "
                      "answer changes they led to; acceptance rate = accepted revisions / searches triggered.")


def table9(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    im = [r for r in _mcq(rows) if r.dataset == f"{NEJM}.internal_medicine"]
    if not im or not _has_clear(rows):
        return None
    out = []
    sources: set[str] = set()
    for cond in conditions:
        mine = [r for r in im if r.condition == cond]
        if not mine:
            continue
        used = sorted({s for r in mine if (s := ClearSummary.view(r.summary).web_source)})
        sources.update(used)
        out.append([_method(cond), ", ".join(used) or "none (no web search)", len(mine), _acc(mine)])
    live = sorted(s for s in sources if s in LIVE_SOURCES or ":" in s)
    if live:
        note = f"Live web search through {', '.join(live)}."
    else:
        note = ("No live web backend is configured: the searching conditions read the offline web "
                f"({', '.join(sorted(sources)) or 'none'}), not a live search. Set settings.dynamic_source: tavily "
                "(TAVILY_API_KEY, network) or a module:Class web source for the paper's live row.")
    return Table("CLEAR Table 9: NEJM-QA internal medicine with live search", ["method", "web_source", "n",
                                                                                "accuracy_%"], out, note=note)


# Table 3 (MedRBench, HealthBench: free text) is built beside the free-text grading, not here.
PAPER_TABLES = tuple(TableSpec(build, late=True) for build in (table1, table2, table4, table5, table8, table9))
