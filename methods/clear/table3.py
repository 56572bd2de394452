"""CLEAR's Table 3 (free-text benchmarks) and HealthBench's per-tag scores, from the result rows.

Table 3 has a row per method (the run's conditions: direct, rag-bm25, clear-default, clear-qpis
...) and the paper's columns: MedRBench Diagnosis, Treatment and Overall (percent judged correct;
Overall pools the cases of both stages, so it is the case-weighted mean of the two, as the paper's
figures are: 957 x 82.34 + 496 x 82.46 over 1,453 = 82.38), and HealthBench Hard's rubric score
(the mean example score clipped to [0, 1], with simple-evals' bootstrap spread and a 95% interval).

Every free-text row of a graded dataset counts: a row with no response, no valid grade or an error
scores 0 and is counted in n_missing (dropping them would reward a condition for failing on the
hard cases). The tag table reads the graded rows only, since an ungraded row has no tag scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from medpanel.agents.freetext.medrbench import DATASETS, PUBLISHED_ANALYSIS
from medpanel.agents.freetext.tasks import HEALTHBENCH
from medpanel.agents.tables import ResultRow, Table
from medpanel.methods.clear.healthbench import REPORTED_TAGS, Aggregate, aggregate
from medpanel.methods.clear.summary import ClearSummary

FREE_TEXT_COLUMNS = (DATASETS["diagnosis"], DATASETS["treatment"], HEALTHBENCH)


def _scores(rows: Sequence[ResultRow], cond: str, dataset: str) -> tuple[list[float], int]:
    """Each row's score (0 where missing) and how many were missing."""
    sel = [r for r in rows if r.condition == cond and r.dataset == dataset and not r.gold]
    out, missing = [], 0
    for r in sel:
        s = ClearSummary.view(r.summary)
        if s.rubric_score is None or r.error:
            missing += 1
            out.append(0.0)
        else:
            out.append(float(s.rubric_score))
    return out, missing


def _pct(values: list[float]) -> float | str:
    return round(100.0 * sum(values) / len(values), 2) if values else "-"


def _ci(a: Aggregate) -> str:
    return f"[{a.ci_low:.4f}, {a.ci_high:.4f}]"


def judge_protocol(rows: Sequence[ResultRow]) -> str:
    """The line saying what MedRBench's treatment judge read: the run's live web search results, as
    the benchmark's protocol does (it searches Bing), or, with none set, each case's published analysis."""
    supports: dict[str, int] = {}
    for r in rows:
        if r.dataset == DATASETS["treatment"] and not r.gold:
            s = ClearSummary.view(r.summary).judge_support
            if s is not None:
                supports[s] = supports.get(s, 0) + 1
    if not supports:
        return ""
    web = sorted(s.removeprefix("web:") for s in supports if s.startswith("web:"))
    lines = []
    if web:
        n = sum(v for k, v in supports.items() if k.startswith("web:"))
        lines.append(f"MedRBench treatment judge: three web search results per case from {', '.join(web)} "
                     f"({n} grades), keywords written from the case, as the benchmark's protocol (Bing).")
    if PUBLISHED_ANALYSIS in supports:
        lines.append(f"No live web search backend is set: MedRBench's treatment judge read each case's published "
                     f"treatment-planning analysis ({supports[PUBLISHED_ANALYSIS]} grades) instead of the web search "
                     "results the benchmark's protocol gives it (set settings.dynamic_source: tavily or a "
                     "module:Class web source).")
    return " " + " ".join(lines)


def table3(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    present = {r.dataset for r in rows if not r.gold}
    if not present & set(FREE_TEXT_COLUMNS):
        return None
    out: list[list[Any]] = []
    for cond in conditions:
        diag, miss_d = _scores(rows, cond, DATASETS["diagnosis"])
        treat, miss_t = _scores(rows, cond, DATASETS["treatment"])
        hb, miss_h = _scores(rows, cond, HEALTHBENCH)
        if not (diag or treat or hb):
            continue
        agg = aggregate(hb) if hb else None
        out.append([cond, _pct(diag), _pct(treat), _pct(diag + treat),
                    round(agg.mean, 4) if agg else "-", _ci(agg) if agg else "-",
                    round(agg.bootstrap_std, 4) if agg else "-",
                    len(diag), len(treat), len(hb), miss_d + miss_t + miss_h])
    if not out:
        return None
    return Table("Table 3 free-text benchmarks (MedRBench, HealthBench Hard)",
                 ["method", "MedRBench_diagnosis", "MedRBench_treatment", "MedRBench_overall", "HealthBench_score",
                  "HealthBench_95%_CI", "HealthBench_bootstrap_std", "n_diagnosis", "n_treatment", "n_healthbench",
                  "n_missing"], out,
                 note="MedRBench: percent of cases the grader judged correct against the case's reference diagnosis "
                      "or treatment plan (the benchmark's outcome evaluator); overall pools both stages' cases. "
                      "HealthBench: mean example score (rubric points met / positive points, negative criteria "
                      "subtracting) clipped to [0, 1]; CI = 2.5-97.5 percentiles and std of 1,000 bootstrap means "
                      "(seed 0). A case with no response, no valid grade or an error scores 0 (n_missing)."
                      + judge_protocol(rows),
                 keep=("method", "MedRBench_overall", "HealthBench_score", "MedRBench_diagnosis",
                       "MedRBench_treatment"))


def healthbench_tag_table(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    out: list[list[Any]] = []
    for cond in conditions:
        per_tag: dict[str, list[float]] = {}
        for r in rows:
            if r.condition != cond or r.dataset != HEALTHBENCH or r.error:
                continue
            tags = ClearSummary.view(r.summary).tag_scores or {}
            for tag, value in tags.items():
                per_tag.setdefault(tag, []).append(float(value))
        for tag in sorted(t for t in per_tag if t.startswith(REPORTED_TAGS)):
            a = aggregate(per_tag[tag])
            out.append([cond, tag, a.n, round(a.mean, 4), _ci(a), round(a.bootstrap_std, 4)])
    if not out:
        return None
    return Table("HealthBench by theme and axis", ["condition", "tag", "n", "score", "95%_CI", "bootstrap_std"], out,
                 note="theme:* tags are the example's (its score); axis:* tags score the criteria carrying the tag "
                      "(points met / positive points among them), on examples where that tag has positive points. "
                      "Each score is the clipped mean over graded examples, as simple-evals reports it.")
