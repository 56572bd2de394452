"""The typed, versioned records a run writes, and the plan resolved once per run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.pipelines import registry
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.store.records import RUN_FORMAT, TRANSCRIPT_FORMAT
from medpanel.experiments.run.store.rundir import load_record, load_transcript, read_transcript
from medpanel.experiments.run.store.storage import Pair  # noqa: F401  (the key type rows and claims share)
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.store.transcript_log import record_path
from medpanel.methods.panel.generalist import GeneralistSettings
from tests.rundir_helpers import completed

SCENARIO = {"name": "rec", "pipeline": "generalist", "flags": {"c": [0, 1]},
            "dataset": {"source": "sample", "subsets": ["medqa-style"], "limit": 2},
            "model": {"backend": "scripted"}, "run": {"workers": 2}}


def _run(tmp_path: Path) -> Runner:
    return completed(SCENARIO, tmp_path)


def test_new_records_carry_their_format_versions(tmp_path: Path) -> None:
    runner = _run(tmp_path)
    meta = json.loads((runner.run_dir / "run.json").read_text(encoding="utf-8"))
    assert next(iter(meta)) == "format_version" and meta["format_version"] == RUN_FORMAT
    plan = meta["plan"]
    assert plan["pipeline"] == "generalist" and plan["settings"]["challenger_depth"] == "standard"
    assert plan["conditions"]["c1"]["challenger"] is True and plan["conditions"]["c0"]["challenger"] is False
    assert plan["conditions"]["c1"]["timing"] == "none"
    store = Store(runner.storage_url, runner.run_dir)
    rows = store.rows()
    store.close()
    assert len(rows) == 4 and all(r.summary["format_version"] == 1 for r in rows)
    for row in rows:
        doc = json.loads(record_path(runner.run_dir, row.transcript).read_text(encoding="utf-8"))
        assert next(iter(doc)) == "format_version" and doc["format_version"] == TRANSCRIPT_FORMAT
        assert doc["summary"] == row.summary
        record = load_transcript(record_path(runner.run_dir, row.transcript))
        assert record.summary["challenged"] == (row.condition == "c1")
    assert load_record(runner.run_dir).format_version == RUN_FORMAT


def test_a_transcript_of_the_wrong_shape_is_one_user_error(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    question = {"dataset": "d", "qid": "q", "text": "t", "options": {"A": "a"}, "gold": ["A"]}
    path.write_text(json.dumps({"condition": "c1", "question": question, "events": [{"kind": "shout"}]}),
                    encoding="utf-8")
    with pytest.raises(UserError, match=r"t\.json: not a medpanel transcript \(events\.0\.kind: "):
        read_transcript(path)


def test_the_pipeline_is_looked_up_and_its_settings_validated_once_per_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lookups: list[str] = []
    validations: list[Any] = []
    real_lookup, real_validate = registry.get_pipeline, GeneralistSettings.model_validate

    def lookup(name: str) -> Any:
        lookups.append(name)
        return real_lookup(name)

    def validate(obj: Any, *args: Any, **kwargs: Any) -> Any:
        validations.append(obj)
        return real_validate(obj, *args, **kwargs)

    import medpanel.experiments.run.scenario.plan as plan_module

    monkeypatch.setattr(plan_module, "get_pipeline", lookup)
    monkeypatch.setattr(GeneralistSettings, "model_validate", validate)
    runner = _run(tmp_path)  # 2 conditions x 2 questions
    assert lookups == ["generalist"] and len(validations) == 1
    resumed = Runner.open(runner.run_dir)  # a resume reads the stored plan: one lookup, one validation
    resumed.prepare()
    resumed.prepare()
    assert lookups == ["generalist", "generalist"] and len(validations) == 2
