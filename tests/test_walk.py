"""The walk of `c` (benchmarks/bench_walk.py, docs/architecture.md): a newcomer following the
Challenger flag from the plan to its request opens at most ten files, each once, on both paths."""

from __future__ import annotations

import pytest

from benchmarks.bench_walk import measure


@pytest.mark.parametrize("pipeline", ["panel", "generalist"])
def test_the_walk_of_c_enters_each_file_once(pipeline: str) -> None:
    plan, run = measure(pipeline)
    assert {f: n for walk in (plan, run) for f, n in walk.entries.items() if n > 1} == {}
    assert len(set(plan.files) | set(run.files)) <= 10
    # it reaches the Challenger's request, through the role and the model room
    assert run.files[-3:] == ["methods/panel/roles/challenger.py", "agents/prompting.py", "agents/model/agent.py"]
