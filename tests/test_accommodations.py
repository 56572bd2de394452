"""Small-model accommodations (passage cuts, string caps, a context window) apply to the embedded
backend only, an explicit setting always wins, and run.json and the report header say which are in force."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines.run import run_question
from medpanel.agents.types import Condition
from medpanel.experiments.run.store.records import RunRecord
from medpanel.methods.clear.settings import ClearSettings
from medpanel.retrieval.corpus import ingest

from .fake_openai import FakeOpenAI, completion, schema_reply
from .scripted_helpers import Q4

PASSAGE = "In acute chest pain an ECG within ten minutes is the first step. " * 20 + "PASSAGE-END-TOKEN"


@pytest.fixture()
def corpus(tmp_path: Path) -> str:
    f = tmp_path / "docs.jsonl"
    f.write_text(json.dumps({"id": "d1", "title": "Chest pain", "content": PASSAGE}) + "\n", encoding="utf-8")
    ingest([f], "acc", progress=False)
    return "acc"


def _upfront(corpus: str, spec: ModelSpec, **settings: Any) -> list[dict[str, Any]]:
    """A generalist with upfront retrieval: the curator sees the passage first. Returns the bodies sent."""
    condition = Condition(slug="upfront", pipeline="generalist", flags={"variant": "upfront"},
                          settings={"corpus": corpus, "k": 1, **settings})
    with FakeOpenAI(lambda body, n: (200, {}, completion(json.dumps(schema_reply(body))))) as srv:
        result = asyncio.run(run_question(condition, Q4, spec, base_url=srv.base_url))
    assert result.error is None, result.error
    return srv.requests


def _curator(bodies: list[dict[str, Any]]) -> str:
    return next(m["content"] for b in bodies for m in b["messages"] if "<passages>" in str(m["content"]))


def test_an_openai_endpoint_gets_whole_passages_and_no_string_cap(corpus: str) -> None:
    for mode in ("json_schema", "json_object"):
        bodies = _upfront(corpus, ModelSpec(backend="openai", name="m", cache="off", structured_output=mode))
        assert "PASSAGE-END-TOKEN" in _curator(bodies), mode
        assert "maxLength" not in json.dumps([b.get("response_format") for b in bodies]), mode


def test_the_embedded_backend_gets_its_caps(corpus: str) -> None:
    bodies = _upfront(corpus, ModelSpec(backend="local", cache="off"))
    curator = _curator(bodies)
    assert "PASSAGE-END-TOKEN" not in curator and PASSAGE[:600] in curator
    schema = bodies[0]["response_format"]["schema"]
    assert bodies[0]["response_format"]["type"] == "json_object"
    assert schema["$defs"]["BriefPoint"]["properties"]["point"]["maxLength"] == 240


def test_an_explicit_setting_wins_on_any_backend(corpus: str) -> None:
    spec = ModelSpec(backend="openai", name="m", cache="off", structured_output="json_object", max_string_chars=50)
    bodies = _upfront(corpus, spec, passage_chars=300)
    curator = _curator(bodies)
    assert PASSAGE[:300] in curator and PASSAGE[:301] not in curator
    assert bodies[0]["response_format"]["schema"]["$defs"]["BriefPoint"]["properties"]["point"]["maxLength"] == 50
    whole = _upfront(corpus, ModelSpec(backend="local", cache="off"), passage_chars=5000)
    assert "PASSAGE-END-TOKEN" in _curator(whole)


def test_clear_passage_lengths_follow_the_backend() -> None:
    s = ClearSettings()
    openai = s.for_backend(ModelSpec(backend="openai"))
    assert (openai.passage_chars, openai.verifier_passage_chars) == (None, None)
    local = s.for_backend(ModelSpec(backend="local"))
    assert (local.passage_chars, local.verifier_passage_chars) == (600, 400)
    mine = ClearSettings(passage_chars=900).for_backend(ModelSpec(backend="local"))
    assert (mine.passage_chars, mine.verifier_passage_chars) == (900, 400)


@pytest.mark.parametrize(("model", "settings", "expected"), [
    ({"backend": "local"}, {}, {"backend": "local", "context_window": 8192, "passage_chars": 600,
                                "max_string_chars": 240}),
    ({"backend": "openai", "name": "gpt-4o-mini"}, {}, {"backend": "openai", "context_window": None,
                                                       "passage_chars": None, "max_string_chars": None}),
    ({"backend": "openai", "name": "m", "context_window": 32768, "structured_output": "json_object",
      "max_string_chars": 400}, {"passage_chars": 900},
     {"backend": "openai", "context_window": 32768, "passage_chars": 900, "max_string_chars": 400}),
    # the grammar cap exists only in json_object mode: in prompt mode nothing is capped
    ({"backend": "local", "structured_output": "prompt"}, {}, {"backend": "local", "context_window": 8192,
                                                               "passage_chars": 600, "max_string_chars": None}),
])
def test_run_json_and_the_report_header_record_the_accommodations(tmp_path: Path, model: dict[str, Any],
                                                                  settings: dict[str, Any],
                                                                  expected: dict[str, Any],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # A remote backend's key is checked when the run is created (no call is made here).
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    from medpanel.experiments.analysis.header import header_lines
    from medpanel.experiments.run.execution.runner import Runner
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import Scenario

    scenario = Scenario.model_validate({"name": "acc", "pipeline": "generalist", "flags": {"c": [1]},
                                        "settings": settings, "dataset": {"limit": 1, "subsets": ["medqa-style"]},
                                        "model": model})
    runner = Runner.create(make_plan(scenario, base_dir=tmp_path), run_dir=tmp_path / "run")
    meta = json.loads((runner.run_dir / "run.json").read_text(encoding="utf-8"))
    assert meta["accommodations"] == expected
    line = next(x for x in header_lines(RunRecord.model_validate(meta)) if x.startswith("accommodations:"))
    for key, value in expected.items():
        if key != "backend" and value is not None:
            assert str(value) in line, (key, line)
    if expected["context_window"] is None:
        assert "whole history" in line and "full passages" in line


def test_clear_runs_also_record_the_verifiers_passage_length(tmp_path: Path) -> None:
    from medpanel.experiments.run.execution.runner import Runner
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import Scenario

    scenario = Scenario.model_validate({"name": "acc", "pipeline": "clear", "variants": ["direct"],
                                        "dataset": {"limit": 1, "subsets": ["medqa-style"]},
                                        "model": {"backend": "local"}})
    runner = Runner.create(make_plan(scenario, base_dir=tmp_path), run_dir=tmp_path / "run")
    meta = json.loads((runner.run_dir / "run.json").read_text(encoding="utf-8"))
    assert meta["accommodations"]["verifier_passage_chars"] == 400
