"""The paired comparisons of free-text scores: the report's table beside the accuracy comparisons.

For each compared pair (the scenario's `compare`, or the pairs that differ in one flag), each
free-text dataset and each repeat: the mean score of a and b over the tasks both ran, the mean
difference b - a with a paired bootstrap interval, the Wilcoxon signed-rank p and its Holm
adjustment over the table (`inference/score_pairs.py`). A task with no response, no valid grade or
an error scores 0, as in the score tables: a condition does not gain by failing.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.inference.contrasts import holm
from medpanel.experiments.analysis.inference.score_pairs import ScorePair, paired_scores
from medpanel.experiments.analysis.stats import NOTHING_TO_TEST
from medpanel.experiments.run.store.rows import Row


def _graded_datasets(rows: Sequence[Row]) -> list[str]:
    """Datasets whose tasks carry a grading key (`summary.rubric`): ungraded free text has no score."""
    return sorted({r.dataset for r in rows if not r.gold and (r.summary or {}).get("rubric")})


def _scores(rows: Sequence[Row], cond: str, dataset: str, rep: int) -> dict[Hashable, float]:
    out: dict[Hashable, float] = {}
    for r in rows:
        if r.condition == cond and r.dataset == dataset and r.repeat == rep and not r.gold:
            score = (r.summary or {}).get("rubric_score")
            out[r.key] = 0.0 if score is None or r.error else float(score)
    return out


def free_text_pair_table(rows: Sequence[Row], pairs: list[tuple[str, str]], *, n_boot: int = 10000,
                         seed: int = 0) -> Table | None:
    datasets = _graded_datasets(rows)
    if not datasets or not pairs:
        return None
    out: list[list[object]] = []
    comps: list[ScorePair] = []
    for a, b in pairs:
        for ds in datasets:
            for rep in sorted({r.repeat for r in rows}):
                sa, sb = _scores(rows, a, ds, rep), _scores(rows, b, ds, rep)
                if not set(sa) & set(sb):
                    continue
                c = paired_scores(sa, sb, n_boot=n_boot, seed=seed)
                out.append([a, b, ds, rep, c.n, round(c.mean_a, 4), round(c.mean_b, 4), round(c.diff, 4),
                            f"[{c.ci_low:.4f}, {c.ci_high:.4f}]", c.n_differ])
                comps.append(c)
    if not out:
        return None
    p_holm = holm([c.p_wilcoxon for c in comps])
    for line, c, ph in zip(out, comps, p_holm, strict=True):
        if math.isnan(c.p_wilcoxon):
            line += ["-", "-", NOTHING_TO_TEST]
            continue
        excludes_zero = c.ci_low > 0 or c.ci_high < 0
        verdict = ("no detectable difference" if not (excludes_zero and ph < 0.05)
                   else "b better" if c.diff > 0 else "a better")
        line += [round(c.p_wilcoxon, 4), round(ph, 4), verdict]
    return Table("Paired comparisons of free-text scores (same tasks)",
                 ["a", "b", "dataset", "repeat", "n", "mean_a", "mean_b", "diff", "95%_CI", "n_differ",
                  "wilcoxon_p", "wilcoxon_p_holm", "verdict"], out,
                 note="Per task score (HealthBench: rubric points met / positive points, unclipped; MedRBench: "
                      "1 correct, 0 wrong); a task with no response, no valid grade or an error scores 0. diff = "
                      "mean(b - a); CI = paired bootstrap over tasks (10,000 resamples); p = two-sided Wilcoxon "
                      "signed-rank test on the per-task differences (zeros dropped); p_holm = Holm over the "
                      f"{len(out)} comparisons of this table. A difference is reported only when its CI excludes "
                      "0 and p_holm < 0.05.",
                 keep=("a", "b", "dataset", "diff", "95%_CI", "wilcoxon_p_holm", "verdict"))
