"""The acts the built-in methods set are the ones their step names meant: on scripted runs of the
shipped scenarios every event's `act` is what `records_v1` reads from a format-1 event, so a run
of either format gives the same trajectories and tables. And an old transcript is read with acts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

import medpanel
from medpanel.agents.events import Act, AnswerAt, Brief, Critique, GroupStart, Recruitment, Vote
from medpanel.experiments.run.store.records import TranscriptRecord
from medpanel.experiments.run.store.records_v1 import act_v1

from .test_scripted_scenarios import _overrides

ROOT = Path(__file__).resolve().parents[1]
ACT: TypeAdapter[Act | None] = TypeAdapter(Act | None)
SCENARIOS = ["ablation_2x2", "channels", "routed", "baselines", "quickstart", "clear_in_panel"]


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_act_is_what_the_step_name_meant(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from medpanel.experiments.run.scenario.scenario import load_scenario

    path = ROOT / "scenarios" / f"{name}.yaml"
    monkeypatch.setenv("MEDPANEL_CORPUS", "quickstart")
    monkeypatch.setenv("MEDPANEL_WEB", "quickstart-web")
    monkeypatch.chdir(path.parent)
    sets = [s for s in _overrides(path) if not s.startswith("dataset.limit")] + ["dataset.limit=1"]
    result = medpanel.run(load_scenario(path, sets), run_dir=tmp_path / "run", workers=1)
    assert result.complete, (result.state, result.reason)
    kinds: set[type] = set()
    for t in result.load().transcripts():
        for n, e in enumerate(t.model_dump(mode="json")["events"]):
            act = ACT.validate_python(e.pop("act"))
            assert act == act_v1(e), f"{t.condition} event {n} ({e['kind']} {e['step']}): {act} != {act_v1(e)}"
            kinds.add(type(act))
    assert AnswerAt in kinds, kinds


def test_a_format_1_transcript_is_read_with_acts() -> None:
    def ev(kind: str, step: str, **more: Any) -> dict[str, Any]:
        return {"kind": kind, "role": more.pop("role", "specialist"), "agent": more.pop("agent", "a"), "step": step,
                **more}

    doc: dict[str, Any] = {"format_version": 1, "condition": "c", "question": {"dataset": "d", "qid": "q", "text": "?",
                                                               "options": {"A": "x"}, "gold": ["A"]},
           "events": [ev("note", "group_start", agent="group_2"),
                      ev("call", "turn:reask", round=1, turn=2), ev("call", "sample_3"),
                      ev("call", "critique:rewrite", role="challenger"), ev("call", "critique"),
                      ev("note", "brief", data={"received_by": ["a"], "trigger": "gate"}),
                      ev("note", "recruitment", data={"recruited": ["cardiology"], "trigger": "self"}),
                      ev("vote", "final", data={"rule": "majority", "tied": ["A", "B"], "counts": {"A": 1, "B": 1}})]}
    acts = [e.act for e in TranscriptRecord.model_validate(doc).events]
    assert acts == [GroupStart(group="g2"), AnswerAt(stage="r1t2"), AnswerAt(stage="answer", voter="sample_3"),
                    Critique(), None, Brief(received_by=("a",), trigger="gate"),
                    Recruitment(recruited=("cardiology",), trigger="self"),
                    Vote(rule="majority", tied=True, counts={"A": 1, "B": 1})]
    assert "act" not in doc["events"][0]  # the document read is left as it was
