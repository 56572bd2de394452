"""The settings the seed paper fixes for its pipelines, and the Challenger's screened critiques.

| setting | value | source |
|---|---|---|
| `settings.rounds` x `turns_per_round` | 3 x 3 | seed paper A.1, every multi-specialist condition |
| `settings.initial_specialists` | 2 | seed paper A.1: two question-conditioned roles |
| `max_recruit_per_turn`, `max_recruit_total`, `max_panel` | 2, 3, 5 | seed paper A.2 |
| `settings.k` | 16 | seed paper A.3 (retrieval depth) |
"""

from __future__ import annotations

from collections.abc import Sequence

from medpanel.experiments.analysis.methods import Deviation, ScenarioFacts
from medpanel.experiments.run.store.rows import Row

PANEL_PIPELINES = ("panel", "calibrated")
"""Pipelines whose conditions are multi-specialist discussions (calibrated: its group levels)."""
SEED_PIPELINES = ("generalist", *PANEL_PIPELINES)
RETRIEVING_VARIANTS = ("upfront", "between-blind", "between-gap", "routed", "clear")


def _retrieves(scenario: ScenarioFacts) -> bool:
    for c in scenario.conditions:
        flags = c.get("flags", {})
        if flags.get("k") == 1 or flags.get("variant") in RETRIEVING_VARIANTS:
            return True
    return False


def deviations(scenario: ScenarioFacts) -> list[Deviation]:
    want: list[tuple[str, object]] = []
    if scenario.pipeline in PANEL_PIPELINES:
        want += [("rounds", 3), ("turns_per_round", 3)]
    if scenario.pipeline == "panel":
        want += [("initial_specialists", 2), ("max_recruit_per_turn", 2), ("max_recruit_total", 3), ("max_panel", 5)]
    if scenario.pipeline in SEED_PIPELINES and _retrieves(scenario):
        want.append(("k", 16))
    return scenario.paper_settings(want)


def screened_critiques(rows: Sequence[Row], order: Sequence[str] = ()) -> str | None:
    """Per condition, the share of its questions on which the Challenger named an option as the answer
    (its critique re-asked, and redacted if the rewrite did too; a row's `critiques_screened`); None
    when no critique was screened. Error rows count among the questions, never as screened."""
    questions: dict[str, int] = {}
    screened: dict[str, list[int]] = {}
    for r in rows:
        questions[r.condition] = questions.get(r.condition, 0) + 1
        n = int(r.summary.get("critiques_screened") or 0)
        if n:
            screened.setdefault(r.condition, []).append(n)
    if not screened:
        return None
    names = [c for c in order if c in screened] + [c for c in screened if c not in order]
    return "Challenger critiques screened for a named answer: " + "; ".join(
        f"{c} {len(screened[c])}/{questions[c]} questions ({100 * len(screened[c]) / questions[c]:.1f}%, "
        f"{sum(screened[c])} critique{'' if sum(screened[c]) == 1 else 's'})" for c in names)
