"""The majority vote and its tie rule, shared by every method that tallies answers.

The self-consistency baseline (`sc`) votes over its samples, the benchmark's medprompt over its
shuffled members, and the published multi-agent methods over their experts
(`multiagent_common.py`): one rule for all, so a tie is settled the same way wherever it falls.

**Tie rule:** among the tied answers, the one that reached the winning count first in the answers'
order wins (B, A, A, B: A reaches two at the third answer, B at the fourth, so A). The rule depends
only on the answers, never on a letter's name. A multi-answer item votes with its whole letter set.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def vote(answers: list[tuple[str, ...] | None]) -> dict[str, Any]:
    """Majority over the valid answers; ties go to the answer that reached the winning count first."""
    valid = [a for a in answers if a]
    if not valid:
        return {"answer": None, "counts": {}, "rule": "no_valid_sample", "tied": []}
    counts = Counter(",".join(a) for a in valid)
    top = max(counts.values())
    tied = [k for k, v in counts.items() if v == top]
    if len(tied) == 1:
        return {"answer": tied[0], "counts": dict(counts), "rule": "majority", "tied": []}
    running: Counter[str] = Counter()
    for a in valid:
        key = ",".join(a)
        running[key] += 1
        if running[key] == top:
            return {"answer": key, "counts": dict(counts), "rule": "tie_first_to_reach_count", "tied": sorted(tied)}
    raise AssertionError("unreachable: some tied answer reaches the top count")
