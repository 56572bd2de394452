"""The seed paper's Table 3 as a test: does adding the specialist channel (r1) to the knowledge channel
(k1), with the Challenger on, hurt? Each added condition minus c1r0k1, paired, Holm-adjusted together."""

from __future__ import annotations

from collections.abc import Sequence

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.inference.contrasts import Adjusted, pair_family
from medpanel.experiments.analysis.inference.paired_data import Correctness, correctness_from_rows
from medpanel.experiments.analysis.study import FAMILY_COLUMNS, FAMILY_KEEP, family_rows
from medpanel.experiments.run.store.rows import Row

BASE = "c1r0k1"
ADDED = ("c1r1k1", "c1r1k1-ind")


def channel_addition(
    data: Correctness,
    base: str = BASE,
    added: Sequence[str] = ADDED,
    *,
    alpha: float = 0.05,
    n_boot: int = 10_000,
    seed: int = 0,
) -> list[Adjusted]:
    """Each `added` condition minus `base`, paired, Holm-adjusted together."""
    return pair_family(data, [(base, a) for a in added], words=("helps", "hurts"), alpha=alpha, n_boot=n_boot,
                       seed=seed)


def table3_contrast(rows: list[Row], conditions: list[str], *, n_boot: int = 10_000) -> Table | None:
    """The contrast over a run's rows; None when the run lacks c1r0k1 or every added condition."""
    added = [c for c in ADDED if c in conditions]
    if BASE not in conditions or not added:
        return None
    fam = channel_addition(correctness_from_rows(rows), BASE, added, n_boot=n_boot)
    return Table("Table 3: adding the specialist channel to the knowledge channel", FAMILY_COLUMNS, family_rows(fam),
                 note=f"diff = added - {BASE} in points, on the questions both answered; verdict 'hurts' or "
                      "'helps' only when the Holm-adjusted p < 0.05.", keep=FAMILY_KEEP)
