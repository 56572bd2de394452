"""The acts the built-in methods set are the ones their step names meant: on scripted runs of the
shipped scenarios every event's `act` is what `records_v1` reads from a format-1 event, so a run
of either format gives the same trajectories and tables. And an old transcript is read with acts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

import medpanel
from medpanel.agents.events import (
    Act,
    AnswerAt,
    Brief,
    Critique,
    FollowUpSearch,
    GroupStart,
    PathwayAnswer,
    Recruitment,
    Ruling,
    Verdict,
    Vote,
)
from medpanel.experiments.analysis.trajectory import trajectory
from medpanel.experiments.run.store.records import TranscriptRecord
from medpanel.experiments.run.store.records_v1 import act_v1

from .test_scripted_scenarios import _overrides

ROOT = Path(__file__).resolve().parents[1]
ACT: TypeAdapter[Act | None] = TypeAdapter(Act | None)
SCENARIOS = ["ablation_2x2", "channels", "routed", "baselines", "quickstart", "clear_in_panel", "clear_quickstart",
             "clear_followup", "clear_freetext"]
ADJUDICATION_ACTS = {"clear_in_panel": {PathwayAnswer, Verdict}, "clear_quickstart": {PathwayAnswer, Verdict, Ruling},
                     "clear_followup": {PathwayAnswer, Verdict, Ruling},
                     "clear_freetext": {PathwayAnswer, Verdict}}
"""The adjudication's acts each scenario's scripted run must show (CLEAR's pathways, verdicts, rulings)."""


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
        doc = t.model_dump(mode="json")
        by_acts = trajectory(doc)
        for n, e in enumerate(doc["events"]):
            act = ACT.validate_python(e.pop("act"))
            assert act == act_v1(e), f"{t.condition} event {n} ({e['kind']} {e['step']}): {act} != {act_v1(e)}"
            kinds.add(type(act))
        # The same events without their acts, read by their step names as a format-1 file is.
        by_names = trajectory({**doc, "format_version": 1})
        assert by_acts == by_names and by_acts.kind != "empty", (t.condition, by_acts, by_names)
    assert ADJUDICATION_ACTS.get(name, set()) <= kinds, kinds
    assert AnswerAt in kinds or (name.startswith("clear_") and name != "clear_in_panel"), kinds


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


def _clear_doc(version: int) -> dict[str, Any]:
    def ev(kind: str, role: str, step: str, **more: Any) -> dict[str, Any]:
        return {"kind": kind, "role": role, "agent": more.pop("agent", role), "step": step, **more}

    return {"format_version": version, "condition": "clear-default",
            "question": {"dataset": "d", "qid": "q", "text": "?", "options": {"A": "x", "B": "y"}, "gold": ["A"]},
            "events": [ev("call", "candidate", "local", agent="local"), ev("call", "candidate", "dynamic:reask"),
                       ev("call", "verifier", "verify", round=1), ev("call", "verifier", "verify:reask", round=1),
                       ev("note", "followup", "followup_merge", round=1, data={"purpose": "guard", "merged": 2}),
                       ev("note", "guard", "override_guard", round=1,
                          data={"outcome": "rejected_no_followup", "reason": "follow-up search disabled"}),
                       ev("note", "audit", "challenge_audit", round=2, data={"outcome": "kept_below_threshold"}),
                       ev("note", "format_gate", "format_gate", data={"valid": False, "reason": "no option letter"}),
                       ev("note", "format_gate", "format_gate", data={"valid": True, "reason": ""}),
                       ev("call", "planner", "plan"), ev("note", "verifier", "heuristic_fallback")]}


CLEAR_ACTS = [PathwayAnswer(pathway="local"), PathwayAnswer(pathway="dynamic"), Verdict(), Verdict(),
              FollowUpSearch(purpose="guard"), Ruling(rule="guard", outcome="rejected_no_followup"),
              Ruling(rule="audit", outcome="kept_below_threshold"),
              Ruling(rule="format_gate", outcome="no option letter"),
              Ruling(rule="format_gate", outcome="valid", intervened=False), None, None]
"""What a CLEAR transcript's events of `_clear_doc` are, as CLEAR's roles now mark them."""


@pytest.mark.parametrize("version", [0, 1, 2])
def test_an_old_clear_transcript_is_read_with_the_adjudications_acts(version: int) -> None:
    """Format 2 gave the debate's events their acts but not CLEAR's: a file of format 2 or older gets
    CLEAR's from its step names as it is read, by the record and by the report's reader alike."""
    from medpanel.experiments.analysis.event_facts import events_of

    doc = _clear_doc(version)
    assert [e.act for e in TranscriptRecord.model_validate(doc).events] == CLEAR_ACTS
    assert [e.act for e in events_of(doc["events"], version)] == CLEAR_ACTS
    assert all("act" not in e for e in doc["events"])  # the document read is left as it was


def test_a_current_transcript_is_not_read_by_its_step_names() -> None:
    """A file of the current format carries its acts: an event without one is the method's own
    business, whatever its step is called (a plugin's note named `override_guard` is no ruling)."""
    from medpanel.experiments.analysis.event_facts import events_of
    from medpanel.experiments.run.store.records import TRANSCRIPT_FORMAT

    doc = _clear_doc(TRANSCRIPT_FORMAT)
    assert TRANSCRIPT_FORMAT == 3
    assert [e.act for e in TranscriptRecord.model_validate(doc).events] == [None] * len(CLEAR_ACTS)
    assert [e.act for e in events_of(doc["events"], TRANSCRIPT_FORMAT)] == [None] * len(CLEAR_ACTS)
