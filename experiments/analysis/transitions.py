"""Answer-transition tables: from the first stage's majority to the final answer, and
which interventions preceded the flips in between.

Both tables are computed from trajectories (`experiments.trajectory`), one per transcript
document; nothing is dropped: error rows and free-text items are counted in their own columns.

**Transition table** (per condition x dataset, and overall): every row lands in exactly one of
`right->right`, `right->wrong`, `wrong->right`, `wrong->wrong`, `right->invalid`, `wrong->invalid`,
`invalid->right`, `invalid->wrong`, `invalid->invalid`, `errors`, `free_text` (they sum to `n`). The
first state is *invalid* when the first stage's majority is a tie or no agent had a valid answer
(or the debate never answered); the final state is *invalid* when the recorded answer is invalid.
Net gain = wrong->right - right->wrong, in questions and in points of the scored rows
(errors included: they contribute 0); its 95% CI is a paired percentile bootstrap over questions
(a question's repeats are resampled together) of the per-row difference +1 / -1 / 0.
`first_acc_%` and `final_acc_%` are the first majority's and the final answer's accuracy over the
same rows (invalid and errors wrong): their difference also counts the moves into and out of
invalid, which the net gain leaves to their own columns.

**Attribution table** (per condition): for each intervention type, the transitions between two
consecutive stages that it came in between, the questions where it fired, the majority flips that
followed within that next stage, by direction (to the right answer, away from it, or to another
wrong position; a tie counts as not right), the agents whose position changed, and the questions
where it fired and nothing changed after any of its firings (no agent moved, the majority stayed).
The row `(none)` counts the transitions no intervention came before. Two interventions before the
same transition both count its flip. Error rows are left out (their debate is incomplete; the
transition table counts them, the export shows their trajectory), and so are free-text rows.
This is association within a debate, not causation (docs/reports.md: "Answer transitions").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from medpanel.agents.tables import OVERALL, Table
from medpanel.experiments.analysis.digest import RowDigest
from medpanel.experiments.analysis.inference.ledger import CallCost
from medpanel.experiments.analysis.methods import reports
from medpanel.experiments.analysis.stats import percentile_bootstraps
from medpanel.experiments.analysis.trajectory import (
    INTERVENTIONS,
    Stage,
    Trajectory,
    direction,
    transition_of,
)
from medpanel.experiments.run.store.rows import Row

CELLS = ("right->right", "right->wrong", "wrong->right", "wrong->wrong", "right->invalid", "wrong->invalid",
         "invalid->right", "invalid->wrong", "invalid->invalid", "errors", "free_text")
TRANSITION_COLUMNS = ["condition", "dataset", "n", *CELLS, "net_gain", "net_gain_pts", "95%_CI_pts",
                      "first_acc_%", "final_acc_%"]
ATTRIBUTION_COLUMNS = ["condition", "intervention", "transitions", "questions", "flips", "to_right", "to_wrong",
                       "to_other_wrong", "agent_changes", "nothing_changed_q", "nothing_changed_%"]
NONE_ROW = "(none)"


def cell_of(t: Trajectory) -> str:
    """The transition table column this row counts in."""
    name = transition_of(t)
    return "errors" if name == "error" else name


@dataclass(frozen=True)
class NetGain:
    n: int
    """Scored rows (free text excluded; errors included)."""
    gain: int
    points: float
    ci_low: float
    ci_high: float

    def ci(self) -> str:
        if np.isnan(self.ci_low):
            return "n/a"
        return f"[{self.ci_low:+.1f}, {self.ci_high:+.1f}]"


def net_gain(ts: Sequence[Trajectory], *, n_boot: int = 10000, seed: int = 0) -> NetGain:
    """wrong->right minus right->wrong, with a paired bootstrap CI over questions (in points)."""
    return net_gains([ts], n_boot=n_boot, seed=seed)[0]


def net_gains(groups: Sequence[Sequence[Trajectory]], *, n_boot: int = 10000, seed: int = 0) -> list[NetGain]:
    """`net_gain` of each group, with one bootstrap call for all (`stats.percentile_bootstraps`:
    groups with as many questions share their resamples' draws; each CI is its own)."""
    tallies = [_tally(ts) for ts in groups]
    cis = percentile_bootstraps([means for _n, _gain, means in tallies], n_boot=n_boot, seed=seed, level=0.95)
    return [NetGain(n, gain, 100.0 * gain / n, 100.0 * low, 100.0 * high) if n else
            NetGain(0, 0, 0.0, float("nan"), float("nan"))
            for (n, gain, _means), (low, high) in zip(tallies, cis, strict=True)]


def _tally(ts: Sequence[Trajectory]) -> tuple[int, int, np.ndarray]:
    """Scored rows, their net gain, and each question's mean change (sorted by question)."""
    per_q: dict[tuple[str, str], list[int]] = defaultdict(list)
    gain = 0
    for t in ts:
        if not t.scored:
            continue
        cell = cell_of(t)
        d = 1 if cell == "wrong->right" else -1 if cell == "right->wrong" else 0
        gain += d
        per_q[(t.dataset, t.qid)].append(d)
    n = sum(len(v) for v in per_q.values())
    # Repeats of a question are one resampling unit; their mean keeps each row's weight equal
    # when every question has the same number of repeats (a run's repeats always do). The sum of
    # a few small integers is exact, so sum / len is the float `np.mean` gives, without its call.
    means = np.array([sum(v) / len(v) for _k, v in sorted(per_q.items())], dtype=float)
    return n, gain, means


def conditions_of(ts: Sequence[Trajectory], conditions: Sequence[str] | None) -> list[str]:
    seen = list(dict.fromkeys(t.condition for t in ts))
    given = list(conditions or [])
    return [c for c in given if c in seen] + [c for c in seen if c not in given]


def transition_rows(ts: Sequence[Trajectory], conditions: Sequence[str] | None = None, *,
                    n_boot: int = 10000) -> list[list[object]]:
    datasets = sorted({t.dataset for t in ts})
    by: dict[tuple[str, str], list[Trajectory]] = defaultdict(list)
    for t in ts:
        by[(t.condition, t.dataset)].append(t)
    groups: list[tuple[str, str, list[Trajectory]]] = []
    for cond in conditions_of(ts, conditions):
        for ds in datasets:
            if by.get((cond, ds)):
                groups.append((cond, ds, by[(cond, ds)]))
        # The overall selection in the input's order, as a filter of `ts` would give it.
        overall = [t for t in ts if t.condition == cond]
        if overall:
            groups.append((cond, OVERALL, overall))
    gains = net_gains([sel for _c, _d, sel in groups], n_boot=n_boot)
    out: list[list[object]] = []
    for (cond, ds, sel), g in zip(groups, gains, strict=True):
        counts = {c: 0 for c in CELLS}
        for t in sel:
            counts[cell_of(t)] += 1
        scored = [t for t in sel if t.scored]
        first_right = sum(1 for t in scored if t.first is not None and t.first.state == "right")
        final_right = sum(1 for t in scored if t.final.state == "right")
        out.append([cond, ds, len(sel), *(counts[c] for c in CELLS), g.gain, round(g.points, 1), g.ci(),
                    round(100.0 * first_right / len(scored), 1) if scored else "-",
                    round(100.0 * final_right / len(scored), 1) if scored else "-"])
    return out


def transition_table(ts: Sequence[Trajectory], conditions: Sequence[str] | None = None, *,
                     n_boot: int = 10000) -> Table:
    return Table("Answer transitions (first-turn majority -> final)", TRANSITION_COLUMNS,
                 transition_rows(ts, conditions, n_boot=n_boot),
                 note="First state = the majority after the first turn (generalist: the initial answer; CLEAR: the "
                      "pathway candidates' majority); invalid = a tie or no valid answer there, or an invalid final "
                      "answer. net_gain = wrong->right - right->wrong; pts = per 100 scored questions (errors "
                      "count 0); CI = paired bootstrap over questions (10,000 resamples). first/final_acc = accuracy "
                      "of the first majority and of the final answer over the same rows.",
                 keep=("condition", "dataset", "net_gain_pts", "95%_CI_pts", "final_acc_%", "first_acc_%", "n"))


@dataclass
class _Tally:
    transitions: int = 0
    flips: dict[str, int] = field(default_factory=lambda: {"to_right": 0, "to_wrong": 0, "to_other_wrong": 0})
    agent_changes: int = 0
    questions: set[tuple[str, str, int]] = field(default_factory=set)
    changed: set[tuple[str, str, int]] = field(default_factory=set)
    """Questions where something changed after at least one firing."""


def agent_changes(a: Stage, b: Stage) -> int:
    """Agents present in both stages whose position differs."""
    return sum(1 for name, cell in b.cells.items() if name in a.cells and a.cells[name].position != cell.position)


def attribution_rows(ts: Sequence[Trajectory], conditions: Sequence[str] | None = None) -> list[list[object]]:
    out: list[list[object]] = []
    for cond in conditions_of(ts, conditions):
        tallies: dict[str, _Tally] = defaultdict(_Tally)
        for t in ts:
            if t.condition != cond or not t.scored or t.error:
                continue
            for a, b in t.transitions():
                kinds = list(dict.fromkeys(x.kind for x in b.before)) or [NONE_ROW]
                flipped = a.majority != b.majority
                moved = agent_changes(a, b)
                for kind in kinds:
                    tally = tallies[kind]
                    tally.transitions += 1
                    tally.questions.add(t.key)
                    tally.agent_changes += moved
                    if flipped:
                        tally.flips[direction(a.state, b.state)] += 1
                    if flipped or moved:
                        tally.changed.add(t.key)
        known = [k for k in (*INTERVENTIONS, NONE_ROW) if k in tallies]
        for kind in known + sorted(set(tallies) - set(known)):
            tally = tallies[kind]
            q = len(tally.questions)
            quiet = q - len(tally.changed)
            out.append([cond, kind, tally.transitions, q, sum(tally.flips.values()), tally.flips["to_right"],
                        tally.flips["to_wrong"], tally.flips["to_other_wrong"], tally.agent_changes, quiet,
                        round(100.0 * quiet / q, 1) if q else 0.0])
    return out


def attribution_table(ts: Sequence[Trajectory], conditions: Sequence[str] | None = None) -> Table:
    return Table("What came before each flip (association, not causation)", ATTRIBUTION_COLUMNS,
                 attribution_rows(ts, conditions),
                 note="Per intervention type: transitions between consecutive turns it came in between, questions "
                      "where it fired, majority flips in the next turn by direction (to_right: into the right answer; "
                      "to_wrong: away from it; to_other_wrong: between wrong positions, ties included), agents who "
                      "changed their letter, and questions where it fired and nothing changed after any firing. "
                      "(none) = transitions with no intervention before them. Two interventions before one turn "
                      "both count its flip. An association within the debate: the paired comparison of conditions "
                      "is the causal estimate.")


def transition_tables(digests: Sequence[RowDigest], conditions: Sequence[str] | None = None, *,
                      scoring: str = "exact_set", n_boot: int = 10000) -> list[Table]:
    """Every answer-transition table the rows' digests support: transitions, attribution, and each
    method's own (`MethodReport.transition_tables`)."""
    ts = [d.trajectory for d in digests]
    out = [transition_table(ts, conditions, n_boot=n_boot), attribution_table(ts, conditions)]
    out += [t for m in reports() for t in m.transition_tables(digests, conditions, scoring=scoring)]
    return [t for t in out if t.rows]


def call_events(digests: Sequence[RowDigest]) -> Callable[[Row], Sequence[CallCost]]:
    """Row -> the calls of its transcript, from the digests already read (`digest.read_digests`), so
    the cost ledger and the transitions share one read of every transcript."""
    by = {(d.row.condition, d.row.dataset, d.row.qid, d.row.repeat): d.calls for d in digests}
    return lambda row: by.get((row.condition, row.dataset, row.qid, row.repeat), ())
