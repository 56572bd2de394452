"""`model.cache`: `run` shares identical requests across conditions, `condition` isolates them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from medpanel.agents.model.cache import ResponseCache
from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines.run import run_question
from medpanel.agents.types import Condition, QuestionResult
from medpanel.experiments.run.store.records import RunRecord

from .scripted_helpers import Q4, cond

TEAM = {"specialists": [{"role": "Cardiologist", "expertise": "heart"},
                        {"role": "Pulmonologist", "expertise": "lungs"}]}


def respond(r: ScriptedRequest) -> Any:
    if r.tag.step.startswith("select_specialists"):
        return TEAM
    if r.tag.step.startswith("recruit_check"):
        return {"needed": False, "specialty": "", "reason": ""}
    return {"reasoning": f"{r.tag.agent} reasons", "answer": "A"}


def panel(**flags: int) -> Condition:
    c = cond("panel", **flags)
    return c.model_copy(update={"settings": {"rounds": 1, "turns_per_round": 2}})


def _both(mode: str, tmp_path: Path) -> tuple[QuestionResult, QuestionResult, int]:
    """c0r0 then c0r1 (identical until a recruitment happens) through one run cache."""
    cache = ResponseCache(tmp_path / f"cache-{mode}")
    client = ScriptedChatCompletionClient(respond)
    spec = ModelSpec(backend="scripted", cache=mode)  # type: ignore[arg-type]
    out = [asyncio.run(run_question(c, Q4, spec, cache=cache, client_factory=lambda s: client))
           for c in (panel(c=0, r=0), panel(c=0, r=1))]
    cache.close()
    return out[0], out[1], len(client.requests)


def test_run_cache_shares_identical_requests_across_conditions(tmp_path: Path) -> None:
    fixed, recruiting, sent = _both("run", tmp_path)
    assert not any(e.cache_hit for e in fixed.events if e.kind == "call")
    turns = [e for e in recruiting.events if e.step in ("select_specialists", "turn")]
    assert turns and all(e.cache_hit for e in turns)  # common random numbers: answered once
    assert sent == fixed.calls + recruiting.calls


def test_condition_cache_sends_every_conditions_own_requests(tmp_path: Path) -> None:
    fixed, recruiting, sent = _both("condition", tmp_path)
    first = [e for e in recruiting.events if e.step in ("select_specialists", "turn")]
    assert first and not any(e.cache_hit for e in recruiting.events if e.kind == "call")
    # the messages are the same as the other condition's, yet they were sent again
    assert [e.messages for e in first] == [e.messages for e in fixed.events if e.step in ("select_specialists", "turn")]
    assert sent == fixed.logical_calls + recruiting.logical_calls
    # within one condition the cache still answers a rerun (resume replays what was sent)
    cache = ResponseCache(tmp_path / "cache-condition")
    again = asyncio.run(run_question(panel(c=0, r=0), Q4, ModelSpec(backend="scripted", cache="condition"),
                                     cache=cache, client_factory=lambda s: ScriptedChatCompletionClient(respond)))
    cache.close()
    assert all(e.cache_hit for e in again.events if e.kind == "call")


def test_the_cache_mode_is_in_run_json_and_the_report_header(tmp_path: Path) -> None:
    from medpanel.experiments.analysis.header import header_lines
    from medpanel.experiments.run.execution.runner import Runner
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import Scenario

    scenario = Scenario.model_validate({"name": "cm", "pipeline": "generalist", "flags": {"c": [0, 1]},
                                        "dataset": {"limit": 1, "subsets": ["medqa-style"]},
                                        "model": {"backend": "scripted", "cache": "condition"}})
    runner = Runner.create(make_plan(scenario, base_dir=tmp_path), run_dir=tmp_path / "run")
    meta = json.loads((runner.run_dir / "run.json").read_text(encoding="utf-8"))
    assert meta["model"]["cache"] == "condition"
    assert any("cache: condition" in line for line in header_lines(RunRecord.model_validate(meta)))
    assert runner.run(install_signals=False)["state"] == "complete"
    assert (runner.run_dir / "cache").is_dir()
