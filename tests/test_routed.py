"""Routed coordination and CLEAR as the panel's evidence channel, with scripted replies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.model.scripted import ScriptedRequest
from medpanel.agents.types import Condition
from medpanel.experiments.cli.main import main
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario.plan import resolve_run
from medpanel.retrieval.corpus import ingest

from .conftest import write
from .scripted_helpers import Q4, run

TEAM = {"specialists": [{"role": "Cardiologist", "expertise": "heart"}, {"role": "Internist", "expertise": "all"}]}


@pytest.fixture()
def corpus(tmp_path: Path) -> str:
    """The local corpus `routedcorpus`, and its offline web `routedweb` (no document in both)."""
    docs = [{"id": "d1", "title": "ECG first", "content": "In acute chest pain an ECG is the first test."},
            {"id": "d2", "title": "Chest pain", "content": "Chest pain evaluation starts with an ECG."}]
    pages = [{"id": "w1", "title": "A blog", "content": "Chest pain? Skip the ECG and go home, says this blog.",
              "url": "https://random-health-blog.example.com/chest-pain"}]
    ingest([write(tmp_path / "c.jsonl", "\n".join(json.dumps(d) for d in docs) + "\n")], "routedcorpus",
           progress=False)
    ingest([write(tmp_path / "w.jsonl", "\n".join(json.dumps(d) for d in pages) + "\n")], "routedweb",
           progress=False)
    return "routedcorpus"


def routed(corpus: str, turns: int, **settings: Any) -> Condition:
    return Condition(slug="c1-routed", pipeline="panel", flags={"c": 1, "variant": "routed"},
                     settings={"rounds": 1, "turns_per_round": turns, "corpus": corpus, "k": 2, **settings})


def script(gaps: list[str], answers: dict[str, str] | None = None, verifier: dict[str, Any] | None = None) -> Any:
    gap_iter = iter(gaps)

    def respond(r: ScriptedRequest) -> Any:
        step = r.tag.step.split(":")[0]
        if step == "select_specialists":
            return TEAM
        if r.tag.role == "challenger":
            gap = next(gap_iter, "none")
            return {"material_weakness": gap != "none", "gap_type": gap, "challenge": f"CHALLENGE-{gap}"}
        if r.tag.role == "knowledge_gate":
            return {"retrieve": True, "knowledge_gap": "first test", "query": "chest pain ECG"}
        if r.tag.role == "curator":
            return {"points": [{"point": f"fact {i}", "sources": [1]} for i in range(5)]}
        if step == "recruit_check":
            return {"needed": True, "specialty": "Radiologist", "reason": "imaging"}
        if step == "recruit":
            return {"specialists": [{"role": "Radiologist", "expertise": "imaging"}]}
        if r.tag.role == "candidate":
            return {"reasoning": f"{r.tag.agent} view", "answer": "B" if r.tag.agent == "dynamic" else "A"}
        if r.tag.role == "verifier":
            return verifier or {"answer": "B", "rationale": "the web says B", "route": "accept_dynamic",
                                "confidence": "high"}
        letter = (answers or {}).get(r.tag.agent, "A")
        return {"reasoning": f"{r.tag.agent} reasons", "answer": letter}

    return respond


def steps(result: Any) -> list[str]:
    return [e.step for e in result.events if e.kind == "call"]


def test_each_route_is_taken_and_recorded(corpus: str) -> None:
    gaps = ["insufficient_evidence", "missing_expertise", "logical_inconsistency", "none"]
    result, client = run(routed(corpus, 5), Q4, script(gaps))
    notes = [e.data for e in result.events if e.step == "route"]
    assert [n["route"] for n in notes] == ["retrieve", "recruit", "critique_round", "none"]
    assert result.summary["routes"] == ["retrieve", "recruit", "critique_round", "none"]
    # retrieval only after the factual gap, recruitment only after the expertise gap
    gate_turns = [e.turn for e in result.events if e.step == "gate"]
    check_turns = {e.turn for e in result.events if e.step == "recruit_check"}
    assert gate_turns == [1] and check_turns == {2}
    # the focused round follows the logical inconsistency, and only that turn
    turn4 = [r for r in client.requests if r.tag.step == "turn" and r.tag.turn == 4]
    turn5 = [r for r in client.requests if r.tag.step == "turn" and r.tag.turn == 5]
    assert turn4 and all("Focused critique round" in r.last and "CHALLENGE-logical_inconsistency" in r.last
                         for r in turn4 if r.tag.agent != "radiologist")
    assert all("Focused critique round" not in r.last for r in turn5)


def test_no_weakness_routes_nowhere(corpus: str) -> None:
    result, client = run(routed(corpus, 3), Q4, script(["none", "none"]))
    assert [e.data["route"] for e in result.events if e.step == "route"] == ["none", "none"]
    assert not any(r.tag.role in ("knowledge_gate", "curator", "recruiter") for r in client.requests)


def test_recruits_never_receive_the_brief_and_votes_count_by_information_block(corpus: str) -> None:
    answers = {"cardiologist": "A", "internist": "A", "radiologist": "B"}
    result, client = run(routed(corpus, 4), Q4, script(["insufficient_evidence", "missing_expertise", "none"],
                                                       answers))
    brief = next(e for e in result.events if e.step == "brief")
    assert set(brief.data["received_by"]) == {"cardiologist", "internist"}
    for r in client.requests:
        if r.tag.agent == "radiologist":
            assert "<evidence_brief>" not in json.dumps(r.messages)
    vote = next(e for e in result.events if e.kind == "vote")
    # two agents who read the same brief form one block; the recruit is another
    assert vote.data["block_counts"] == {"A": 1, "B": 1}
    assert vote.data["rule"] == "blocks tied -> raw majority" and result.answer == ("A",)


def test_routed_needs_the_challenger_at_plan_time() -> None:
    cond = Condition(slug="c0r1-routed", pipeline="panel", flags={"c": 0, "r": 1, "variant": "routed"},
                     settings={"rounds": 1, "turns_per_round": 2})
    with pytest.raises(UserError, match=r"^s\.yaml: variants: condition 'c0r1-routed': routed .* Use c1r1-routed"):
        resolve_run("panel", cond.settings, [cond], file="s.yaml")


def test_the_cli_refuses_c0_routed_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = write(tmp_path / "s.yaml", "name: r\npipeline: panel\nvariants: [c1-routed, c0-routed]\n"
                     "settings: {rounds: 1, turns_per_round: 2}\ndataset: {source: sample, limit: 1}\n"
                     "model: {backend: scripted}\n")
    for command in (["validate", str(scenario)], ["run", str(scenario), "--run-dir", str(tmp_path / "run")]):
        with pytest.raises(SystemExit) as exit_:
            main(command)
        err = capsys.readouterr().err
        assert exit_.value.code == 2, err
        assert err.strip().splitlines() == [f"error: {scenario}: variants: condition 'c0-routed': routed "
                                            "coordination routes on the Challenger's diagnosis, which c0 switches "
                                            "off. Use c1-routed (or drop the variant)"], err
        assert "Traceback" not in err
    assert not (tmp_path / "run").exists()  # refused before a run directory was made


def test_clear_channel_keeps_a_weak_web_source_from_flipping_the_panel(corpus: str) -> None:
    cond = Condition(slug="c1r0k1", pipeline="panel", flags={"c": 1, "r": 0, "k": 1},
                     settings={"rounds": 1, "turns_per_round": 2, "corpus": corpus, "k": 2, "k_source": "clear",
                               "web_corpus": "routedweb"})
    result, client = run(cond, Q4, script(["insufficient_evidence"]))
    brief = next(e for e in result.events if e.step == "brief")
    assert brief.data["source"] == "clear" and brief.data["panel_answer"] == ["A"]
    assert brief.data["candidates"] == {"parametric": ["A"], "local": ["A"], "dynamic": ["B"]}
    # the verifier wanted the web's B, but no high-quality source: the guard rejects the override
    assert brief.data["guard"]["outcome"] == "rejected_no_high"
    assert brief.data["route"] == "keep_local"
    text = next(r for r in client.requests if r.tag.step == "turn" and r.tag.turn == 2).last
    assert "route keep_local" in text and "Override guard: rejected_no_high" in text
    assert "[low quality]" in text  # the web document's tier travels with it
    assert result.answer == ("A",)
    assert result.summary["clear_routes"] == ["keep_local"]


def test_clear_variant_slug_selects_the_clear_channel(corpus: str) -> None:
    cond = Condition(slug="c1r0k1-clear", pipeline="panel", flags={"c": 1, "r": 0, "k": 1, "variant": "clear"},
                     settings={"rounds": 1, "turns_per_round": 2, "corpus": corpus, "k": 2, "web_corpus": "routedweb"})
    result, _ = run(cond, Q4, script(["insufficient_evidence"]))
    assert next(e for e in result.events if e.step == "brief").data["source"] == "clear"
    plain = Condition(slug="c1r0k1", pipeline="panel", flags={"c": 1, "r": 0, "k": 1},
                      settings={"rounds": 1, "turns_per_round": 2, "corpus": corpus, "k": 2})
    result, _ = run(plain, Q4, script(["insufficient_evidence"]))
    assert "source" not in next(e for e in result.events if e.step == "brief").data
