"""The generalist backbone's logic with scripted replies."""

from __future__ import annotations

from medpanel.agents.model.scripted import ScriptedRequest

from .scripted_helpers import Q4, QMULTI, cond, run


def answer(letter: str, why: str = "because") -> dict[str, str]:
    return {"reasoning": why, "answer": letter}


def test_c0_initial_answer_is_final() -> None:
    result, client = run(cond("generalist", c=0), Q4, lambda r: answer("A"))
    assert result.answer == ("A",) and result.correct and not result.invalid
    assert [e.step for e in result.events if e.kind == "call"] == ["initial"]
    assert result.calls == 1 and len(client.requests) == 1


def test_c1_challenge_then_reconsideration_is_final() -> None:
    def responder(r: ScriptedRequest) -> dict:
        if r.tag.role == "challenger":
            return {"material_weakness": True, "gap_type": "missing_differential",
                    "challenge": "Aortic dissection was not considered."}
        return answer("B") if r.tag.step == "initial" else answer("A", "dissection excluded")

    result, client = run(cond("generalist", c=1), Q4, responder)
    steps = [(e.role, e.step) for e in result.events if e.kind == "call"]
    assert steps == [("generalist", "initial"), ("challenger", "critique"), ("generalist", "reconsider")]
    # the Challenger sees the initial trace; the reconsideration sees the critique
    assert "because" in client.requests[1].last
    assert "Aortic dissection was not considered." in client.requests[2].last
    assert result.answer == ("A",) and result.correct
    assert result.summary["changed"] is True and result.summary["gap_type"] == "missing_differential"


def test_c1_without_weakness_keeps_initial_answer() -> None:
    def responder(r: ScriptedRequest) -> dict:
        if r.tag.role == "challenger":
            return {"material_weakness": False, "gap_type": "none", "challenge": ""}
        return answer("C")

    result, _ = run(cond("generalist", c=1), Q4, responder)
    assert [e.step for e in result.events if e.kind == "call"] == ["initial", "critique"]
    assert result.answer == ("C",) and not result.correct
    assert any(e.step == "no_reconsideration" for e in result.events)


def test_unparseable_reply_gets_one_reask_then_invalid() -> None:
    result, client = run(cond("generalist", c=0), Q4, lambda r: "I think it is probably A.")
    calls = [e for e in result.events if e.kind == "call"]
    assert len(calls) == 2 and calls[1].step == "initial:reask"
    assert "could not be used" in client.requests[1].last
    assert result.invalid and result.answer == () and not result.correct
    assert calls[1].invalid and not calls[0].invalid


def test_letter_outside_options_is_invalid_not_scored() -> None:
    result, _ = run(cond("generalist", c=0), Q4, lambda r: answer("E"))
    assert result.invalid and result.answer == ()


def test_reask_recovers() -> None:
    replies = iter(["no json here", '{"reasoning": "x", "answer": "A"}'])
    result, _ = run(cond("generalist", c=0), Q4, lambda r: next(replies))
    assert result.answer == ("A",) and not result.invalid and result.calls == 2


def test_challenger_answer_is_redacted() -> None:
    def responder(r: ScriptedRequest) -> dict:
        if r.tag.role == "challenger":
            return {"material_weakness": True, "gap_type": "insufficient_evidence",
                    "challenge": "The ECG finding is unexplained. The correct answer is D."}
        return answer("A")

    result, client = run(cond("generalist", c=1), Q4, responder)
    critique = next(e for e in result.events if e.role == "challenger")
    assert critique.data.get("answer_redacted") is True
    assert "correct answer is D" not in client.requests[-1].last
    assert "The ECG finding is unexplained." in client.requests[-1].last


def test_multi_answer_exact_set() -> None:
    result, _ = run(cond("generalist", c=0), QMULTI, lambda r: {"reasoning": "x", "answer": ["C", "A"]})
    assert result.answer == ("A", "C") and result.correct
    partial, _ = run(cond("generalist", c=0), QMULTI, lambda r: {"reasoning": "x", "answer": ["A"]})
    assert not partial.correct and not partial.invalid


def test_model_error_is_recorded_not_raised() -> None:
    def responder(r: ScriptedRequest) -> dict:
        raise ConnectionError("boom")

    result, _ = run(cond("generalist", c=0), Q4, responder, max_retries=0)
    assert result.error and result.error_kind and not result.correct
    assert result.events and result.events[-1].error
