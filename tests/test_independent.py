"""Independent coordination (`c1r1k1-ind`, paper 3.2 / A.2): recruits give targeted auxiliary
assessments of the gap that summoned them, and the moderator decides from the panel's votes plus
those assessments by the documented rule, with a letter-free fallback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.model.scripted import ScriptedRequest
from medpanel.agents.types import Condition

from .scripted_helpers import Q4, cond, run

DOCS = [{"id": f"d{i}", "title": f"Chest pain {i}", "content": f"In chest pain an ECG comes first ({i})."}
        for i in range(3)]


@pytest.fixture()
def corpus(tmp_path: Path) -> str:
    f = tmp_path / "docs.jsonl"
    f.write_text("\n".join(json.dumps(d) for d in DOCS), encoding="utf-8")
    from medpanel.retrieval.corpus import ingest

    ingest([f], "indcorpus", progress=False)
    return "indcorpus"


def ind(corpus: str, turns: int = 3) -> Condition:
    c = cond("panel", c=1, r=1, k=1)
    return c.model_copy(update={"slug": "c1r1k1-ind", "flags": {**c.flags, "variant": "ind"},
                                "settings": {"rounds": 1, "turns_per_round": turns, "corpus": corpus, "k": 2,
                                             "max_recruit_per_turn": 1}})


def script(panel: dict[str, list[str]] | None = None, aux: str | None = "B", moderator: Any = None) -> Any:
    """`panel`: each specialist's letters turn by turn; `aux`: the assessor's letter (None: invalid)."""
    seq = {name: iter(letters) for name, letters in (panel or {}).items()}

    def respond(r: ScriptedRequest) -> Any:
        step = r.tag.step.split(":")[0]
        if step == "select_specialists":
            return {"specialists": [{"role": "Cardiologist", "expertise": "heart"},
                                    {"role": "Emergency physician", "expertise": "ER"}]}
        if r.tag.role == "challenger":
            return {"material_weakness": True, "gap_type": "missing_expertise",
                    "challenge": "GAP-CRITIQUE-TOKEN: the imaging findings were never interpreted."}
        if r.tag.role == "knowledge_gate":
            return {"retrieve": True, "knowledge_gap": "first test", "query": "chest pain ECG"}
        if r.tag.role == "curator":
            return {"points": [{"point": f"BRIEF-TOKEN fact {i}", "sources": [1]} for i in range(5)]}
        if step == "recruit_check":
            return {"needed": True, "specialty": "Radiologist", "reason": "RECRUIT-REASON-TOKEN imaging unread"}
        if step == "recruit":
            return {"specialists": [{"role": "Radiologist", "expertise": "imaging"}]}
        if step == "auxiliary_assessment":
            return {"reasoning": "AUX-ASSESSMENT-TOKEN the film shows it", "answer": aux} if aux else "not json"
        if step == "auxiliary_moderation":
            return moderator if moderator is not None else "not json"
        letter = next(seq[r.tag.agent]) if r.tag.agent in seq else "A"
        return {"reasoning": f"{r.tag.agent} thinks", "answer": letter}

    return respond


def sent(r: ScriptedRequest) -> str:
    return "\n".join(str(m["content"]) for m in r.messages)


def vote_of(result: Any) -> dict[str, Any]:
    return next(e for e in result.events if e.kind == "vote").data


def test_recruits_assess_the_gap_that_summoned_them_and_never_see_a_brief(corpus: str) -> None:
    result, client = run(ind(corpus), Q4, script(aux="A"))
    mine = [r for r in client.requests if r.tag.agent == "radiologist"]
    assert [r.tag.step for r in mine] == ["auxiliary_assessment"]  # consulted once; takes no turn
    text = sent(mine[0])
    assert "GAP-CRITIQUE-TOKEN" in text and "RECRUIT-REASON-TOKEN" in text  # the gap that summoned it
    assert "BRIEF-TOKEN" not in text and "<evidence_brief>" not in text
    assert "cardiologist thinks" not in text  # nor the evidence-informed discussion
    assert "team consults you for one targeted assessment" in mine[0].system
    # it is not asked whether the panel needs more people, and its assessment is not a post
    assert all(r.tag.agent != "radiologist" for r in client.requests if r.tag.step == "recruit_check")
    assert all("AUX-ASSESSMENT-TOKEN" not in sent(r) for r in client.requests if r.tag.step == "turn")
    assert result.summary["auxiliary_assessments"] == 1 and result.summary["recruited_roles"] == ["Radiologist"]


def test_the_moderator_receives_the_votes_and_the_auxiliary_assessments(corpus: str) -> None:
    result, client = run(ind(corpus), Q4, script(aux="B", moderator={"reasoning": "the film", "answer": "B"}))
    (mod,) = [r for r in client.requests if r.tag.step == "auxiliary_moderation"]
    text = sent(mod)
    assert "AUX-ASSESSMENT-TOKEN" in text and "GAP-CRITIQUE-TOKEN" in text
    assert "cardiologist thinks" in text and "emergency_physician thinks" in text  # the panel's positions
    assert mod.model is not None and mod.model.model_json_schema()["properties"]["answer"]["enum"] == ["A", "B"]
    vote = vote_of(result)
    assert vote["rule"] == "auxiliary-informed moderator"
    assert vote["inputs"]["panel_votes"] == {"cardiologist": "A", "emergency_physician": "A"}
    assert vote["inputs"]["candidates"] == ["A", "B"]
    assert vote["inputs"]["auxiliary"][0]["answer"] == ["B"] and vote["inputs"]["auxiliary"][0]["valid"]
    assert vote["outcome"] == {"answer": ["B"], "decided_by": "moderator"}
    assert result.answer == ("B",)


def test_agreement_needs_no_moderator_call(corpus: str) -> None:
    result, client = run(ind(corpus), Q4, script(aux="A"))
    assert not any(r.tag.step == "auxiliary_moderation" for r in client.requests)
    assert vote_of(result)["outcome"] == {"answer": ["A"], "decided_by": "agreement"} and result.answer == ("A",)


def test_an_invalid_moderator_falls_back_to_the_pooled_majority(corpus: str) -> None:
    result, _ = run(ind(corpus), Q4, script(aux="B"))  # panel A, A; assessor B; moderator invalid twice
    vote = vote_of(result)
    assert vote["outcome"] == {"answer": ["A"], "decided_by": "fallback: pooled majority"}
    assert vote["pooled"] == {"A": 2, "B": 1} and result.answer == ("A",)


def test_a_tie_the_fallback_cannot_break_is_invalid_never_a_letter(corpus: str) -> None:
    # two turns: panel A/C split in both, so support is A 2, C 2; the assessor says B (1)
    panel = {"cardiologist": ["A", "A"], "emergency_physician": ["C", "C"]}
    result, _ = run(ind(corpus, turns=2), Q4, script(panel, aux="B"))
    vote = vote_of(result)
    assert vote["outcome"] == {"answer": [], "decided_by": "fallback: unresolved tie"}
    assert result.invalid and result.answer == ()


def test_an_invalid_assessment_is_counted_and_the_panel_votes_as_usual(corpus: str) -> None:
    result, client = run(ind(corpus), Q4, script(aux=None))
    assert [r.tag.step for r in client.requests if r.tag.agent == "radiologist"] == \
        ["auxiliary_assessment", "auxiliary_assessment:reask"]
    vote = vote_of(result)
    assert vote["auxiliary_invalid"] == 1 and vote["rule"] == "majority"
    assert vote["outcome"]["decided_by"] == "majority" and result.answer == ("A",)
    assert result.summary["auxiliary_invalid"] == 1
