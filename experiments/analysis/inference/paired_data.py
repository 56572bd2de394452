"""Per-question correctness of several conditions, aligned on the same questions and repeats.

Every paired statistic (factorial contrasts, repeats, the planner's pilot rates) starts from
one array `y[condition, question, repeat]`. Pairing is the point: a question enters only when
every condition answered it in every repeat, so each contrast compares like with like. Questions
left out are counted, never silently dropped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["Aligned", "Correctness", "RowLike", "align", "correctness_from_rows"]

Correctness = Mapping[str, Mapping[Hashable, Sequence[bool] | bool]]
"""condition -> question key -> correctness per repeat (in repeat order), or one bool for one run."""


class RowLike(Protocol):
    """What the store's `Row` offers; invalid answers and errors arrive as `correct=False`."""

    # Read-only members, so a frozen dataclass (the store's Row) satisfies the protocol.
    @property
    def condition(self) -> str: ...
    @property
    def repeat(self) -> int: ...
    @property
    def correct(self) -> bool: ...
    @property
    def key(self) -> Hashable: ...


@dataclass(frozen=True)
class Aligned:
    """Correctness on the questions every condition answered in every repeat."""

    conditions: tuple[str, ...]
    keys: tuple[Hashable, ...]
    y: np.ndarray
    """bool, shape (conditions, questions, repeats)."""
    dropped: int
    """Questions some condition answered but that miss a condition or a repeat, left out."""

    @property
    def n(self) -> int:
        return int(self.y.shape[1])

    @property
    def repeats(self) -> int:
        return int(self.y.shape[2])

    def successes(self) -> np.ndarray:
        """Correct answers per (question, condition) over the repeats: int, shape (questions, conditions)."""
        return np.asarray(self.y.sum(axis=2).T, dtype=np.int64)

    def index(self, condition: str) -> int:
        return self.conditions.index(condition)


def _as_repeats(value: Sequence[bool] | bool, where: str) -> list[bool]:
    seq: Sequence[object] = [value] if isinstance(value, bool | np.bool_ | int | np.integer) else value
    out = []
    for v in seq:
        # Strict: a stray None or score must not silently count as wrong (or right).
        if not (isinstance(v, bool | np.bool_ | int | np.integer) and v in (0, 1)):
            raise ValueError(f"{where}: correctness values must be bool (or 0/1), got {v!r}")
        out.append(bool(v))
    return out


def align(data: Correctness, conditions: Sequence[str], *, repeats: int | None = None) -> Aligned:
    """Align `conditions` of `data` on their common questions, each with the full set of repeats.

    The number of repeats is `repeats` (the first that many of each question) or else the largest
    any (condition, question) has; a question with fewer in some condition (an unfinished repeat)
    is left out and counted in `dropped`. Keys are sorted by repr, so a resample depends on the
    question set, not on dict order.
    """
    if not conditions:
        raise ValueError("align needs at least one condition")
    missing = [c for c in conditions if c not in data]
    if missing:
        raise ValueError(f"no results for condition(s) {', '.join(map(repr, missing))}")
    per: dict[str, dict[Hashable, list[bool]]] = {
        c: {k: _as_repeats(v, f"{c}/{k!r}") for k, v in data[c].items()} for c in conditions
    }
    any_keys = set().union(*(per[c].keys() for c in conditions))
    if repeats is not None and repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    k_max = repeats or max((len(v) for c in conditions for v in per[c].values()), default=0)
    keep = sorted(
        (k for k in any_keys if all(len(per[c].get(k, ())) >= k_max for c in conditions)), key=repr
    )
    y = np.zeros((len(conditions), len(keep), k_max), dtype=bool)
    for i, c in enumerate(conditions):
        if keep:
            y[i] = np.array([per[c][k][:k_max] for k in keep], dtype=bool)
    return Aligned(tuple(conditions), tuple(keep), y, dropped=len(any_keys) - len(keep))


def correctness_from_rows(rows: Iterable[RowLike]) -> dict[str, dict[Hashable, list[bool]]]:
    """Store rows -> condition -> question -> correctness per repeat, ordered by repeat index.

    A repeat a question lacks leaves its list shorter, so `align` leaves that question out.
    """
    by: dict[str, dict[Hashable, dict[int, bool]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        by[r.condition][r.key][r.repeat] = bool(r.correct)
    return {c: {k: [reps[i] for i in sorted(reps)] for k, reps in qs.items()} for c, qs in by.items()}
