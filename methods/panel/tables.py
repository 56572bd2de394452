"""The panel's report tables: recruitment (the seed paper's Table 11) and the self-assessment
diagnostic (its Table 2B). The calibrated backbone's group levels report recruitment too."""

from __future__ import annotations

from collections.abc import Sequence

from medpanel.agents.tables import OVERALL, ResultRow, Table, TableSpec, pct
from medpanel.methods.panel.summary import PanelSummary


def _summaries(rows: Sequence[ResultRow]) -> dict[int, PanelSummary]:
    """Each row's summary read once, as the panel wrote it."""
    return {id(r): PanelSummary.view(r.summary) for r in rows}


def recruitment_table(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    s = _summaries(rows)
    out = []
    for cond in conditions:
        sel = [r for r in rows if r.condition == cond and not r.error and s[id(r)].final_panel_size is not None]
        if not sel:
            continue
        n = len(sel)
        recruited_q = sum(1 for r in sel if (s[id(r)].recruited or 0) > 0)
        out.append([cond, n, recruited_q, round(pct(recruited_q, n), 1),
                    round(sum((s[id(r)].recruited or 0) for r in sel) / n, 2),
                    round(sum((s[id(r)].final_panel_size or 0) for r in sel) / n, 2)])
    if not out:
        return None
    return Table("Recruitment", ["condition", "n", "questions_recruited", "recruitment_rate_%",
                                 "recruits_per_q", "mean_final_panel"], out)


def recruitment_by_dataset_table(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    """The seed paper's Table 11: recruitment rate beside accuracy, per dataset and condition."""
    s = _summaries(rows)
    datasets = sorted({r.dataset for r in rows})
    out = []
    for cond in conditions:
        if not any(r.condition == cond and s[id(r)].final_panel_size is not None for r in rows):
            continue
        for ds in [*datasets, OVERALL]:
            sel = [r for r in rows if r.condition == cond and (ds == OVERALL or r.dataset == ds)]
            if not sel:
                continue
            ok = [r for r in sel if not r.error and s[id(r)].final_panel_size is not None]
            recruited_q = sum(1 for r in ok if (s[id(r)].recruited or 0) > 0)
            out.append([cond, ds, len(sel), len(sel) - len(ok), round(pct(sum(r.correct for r in sel), len(sel)), 1),
                        recruited_q, round(pct(recruited_q, len(ok)), 1),
                        round(sum((s[id(r)].recruited or 0) for r in ok) / len(ok), 2) if ok else 0.0,
                        round(sum((s[id(r)].final_panel_size or 0) for r in ok) / len(ok), 2) if ok else 0.0])
    if not out:
        return None
    return Table("Recruitment per dataset", ["condition", "dataset", "n", "errors", "accuracy_%", "questions_recruited",
                                            "recruitment_rate_%", "recruits_per_q", "mean_final_panel"], out,
                 note="The seed paper's Table 11: recruitment rate = questions with at least one recruited role / "
                      "questions answered without error; accuracy over all n (errors and invalid answers wrong).")


def self_assessment_table(rows: Sequence[ResultRow], conditions: list[str]) -> Table | None:
    """The paper's Table 2B: accuracy, error rate, questions recruited and mean agents."""
    s = _summaries(rows)
    out = []
    for cond in conditions:
        sel = [r for r in rows if r.condition == cond and s[id(r)].self_assessment is not None]
        if not sel:
            continue
        n = len(sel)
        k = sum(r.correct for r in sel)
        recruited = sum(1 for r in sel if (s[id(r)].recruited or 0) > 0)
        out.append([cond, n, round(pct(k, n), 1), round(100 - pct(k, n), 1), f"{recruited}/{n}",
                    round(pct(recruited, n), 1), round(sum((s[id(r)].final_panel_size or 0) for r in sel) / n, 2)])
    if not out:
        return None
    return Table("Self-assessment diagnostic", ["condition", "n", "accuracy_%", "error_rate_%", "recruited",
                                                "recruited_%", "mean_agents"], out)


PANEL_TABLES = (TableSpec(recruitment_table), TableSpec(recruitment_by_dataset_table))
"""After these, a panel reports the knowledge channel's table and its self-assessment diagnostic."""
