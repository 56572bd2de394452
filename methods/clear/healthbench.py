"""HealthBench's scoring, as OpenAI's simple-evals computes it (`healthbench_eval.py`, MIT).

- An example's score is the points of the rubric criteria the grader judged met (negative points
  count: a met undesirable criterion subtracts) over the sum of the positive points. It is not
  clipped: an example can score below 0 (or, with no negative criteria met, at most 1).
- Each example tag (`theme:...`, `physician_agreed_category:...`) gets the example's score; each
  rubric tag (`axis:...`, `level:...`) gets the same ratio over the criteria carrying that tag,
  where they have positive points.
- Over examples, each metric is the mean clipped to [0, 1], with the standard deviation of 1,000
  bootstrap means (each clipped) as simple-evals reports it, and here also the 2.5 and 97.5
  percentiles of those means (a 95% interval).

The grader's per-criterion decisions are kept (the decision event's `grade.items`), so every number
here can be recomputed by hand from the transcript.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

REPORTED_TAGS = ("theme:", "axis:")
"""The tags the report breaks scores down by (a row's summary keeps these; the grade keeps all)."""
BOOTSTRAP = 1000
"""Resamples of the bootstrap, as simple-evals draws them."""


class Item(Protocol):
    @property
    def points(self) -> float: ...
    @property
    def tags(self) -> list[str]: ...


def points_ratio(items: Sequence[Item], met: Sequence[bool]) -> float | None:
    """Points met over positive points (None when no criterion has positive points)."""
    possible = sum(i.points for i in items if i.points > 0)
    if possible <= 0:
        return None
    return sum(i.points for i, m in zip(items, met, strict=True) if m) / possible


def example_metrics(items: Sequence[Item], met: Sequence[bool], example_tags: Iterable[str]) -> dict[str, float]:
    """`overall_score`, each example tag and each rubric tag of one graded example."""
    overall = points_ratio(items, met)
    if overall is None:
        raise ValueError("a HealthBench example needs at least one criterion with positive points")
    out = {"overall_score": overall}
    out.update({tag: overall for tag in example_tags})
    by_tag: dict[str, list[int]] = {}
    for n, item in enumerate(items):
        for tag in dict.fromkeys(item.tags):
            by_tag.setdefault(tag, []).append(n)
    for tag, idx in by_tag.items():
        score = points_ratio([items[i] for i in idx], [met[i] for i in idx])
        if score is not None:
            out[tag] = score
    return out


def clipped_mean(values: Sequence[float]) -> float:
    return min(1.0, max(0.0, sum(values) / len(values)))


@dataclass(frozen=True)
class Aggregate:
    mean: float
    """The mean over examples, clipped to [0, 1]."""
    n: int
    bootstrap_std: float
    ci_low: float
    ci_high: float


def aggregate(values: Sequence[float], *, seed: int = 0, resamples: int = BOOTSTRAP) -> Aggregate:
    """The clipped mean of `values` with its bootstrap spread (seeded: the report is reproducible)."""
    if not values:
        raise ValueError("no values to aggregate")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(clipped_mean([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    mu = sum(means) / resamples
    std = (sum((m - mu) ** 2 for m in means) / resamples) ** 0.5
    return Aggregate(mean=clipped_mean(values), n=n, bootstrap_std=std,
                     ci_low=means[int(0.025 * resamples)], ci_high=means[min(resamples - 1, int(0.975 * resamples))])
