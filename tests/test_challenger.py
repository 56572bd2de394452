"""The Challenger's answer screen: a challenge that names (or is) an option as the answer is re-asked
once, then redacted; legitimate mentions of options pass untouched."""

from __future__ import annotations

from typing import Any

import pytest

from medpanel.agents.model.scripted import ScriptedRequest
from medpanel.agents.types import Question
from medpanel.methods.panel.roles.challenger import Critique, leaks, screen

from .scripted_helpers import Q4, cond, run

QB = Question(dataset="unit", qid="b1", text="Confusion, nystagmus and ataxia in heavy alcohol use. Deficiency of?",
              options={"A": "Vitamin A", "B": "Thiamine (vitamin B1)", "C": "Vitamin C", "D": "Folate"}, gold=("B",))
YESNO = Question(dataset="unit", qid="y1", text="Does sodium reduction lower blood pressure?",
                 options={"A": "yes", "B": "no", "C": "maybe"}, gold=("A",))

LEAKING = [
    (Q4, "(C) fits better."),
    (Q4, "C fits better with the history than A."),
    (Q4, "A"),
    (Q4, "(A)"),
    (Q4, "D."),
    (Q4, "Option B is the correct answer."),
    (Q4, "B is more likely here."),
    (Q4, "The team ignored the troponin. I would go with (D)."),
    (Q4, "Choose D."),
    (Q4, "The answer should be C."),
    (Q4, "MRI"),  # the challenge is an option's text
    (Q4, "(C) MRI"),
    (QB, "The answer is Thiamine (vitamin B1)."),
    (QB, "Thiamine (vitamin B1)"),
    (QB, "Thiamine (vitamin B1) is the best answer."),
    (YESNO, "The answer is yes."),
    (YESNO, "no"),
]

LEGITIMATE = [
    (Q4, "Option C's mechanism does not explain the rash."),
    (Q4, "The team has not explained why option B was rejected."),
    (Q4, "A more careful look at renal function is needed before settling."),
    (Q4, "Option B is more likely to cause harm if the pain is cardiac; was that weighed?"),
    (Q4, "Compare A and C on the ECG findings."),
    (Q4, "Is the MRI finding consistent with the history?"),
    (Q4, "Why was an ECG not considered first?"),
    (QB, "Nobody discussed whether folate deficiency explains the ataxia."),
    (YESNO, "The trial had no control for baseline salt intake; is the effect size reliable?"),
]


@pytest.mark.parametrize(("question", "text"), LEAKING)
def test_a_challenge_that_names_an_option_as_the_answer_leaks(question: Question, text: str) -> None:
    assert leaks(text, question.options), text
    critique = Critique(material_weakness=True, gap_type="unresolved_option_conflict", challenge=text)
    screened, redacted = screen(critique, question.options)
    assert redacted and not leaks(screened.challenge, question.options)


@pytest.mark.parametrize(("question", "text"), LEGITIMATE)
def test_legitimate_mentions_of_options_are_kept(question: Question, text: str) -> None:
    assert not leaks(text, question.options), text
    critique = Critique(material_weakness=True, gap_type="missing_differential", challenge=text)
    assert screen(critique, question.options) == (critique, False)


def _generalist(challenges: list[str]) -> tuple[Any, Any]:
    replies = iter(challenges)

    def responder(r: ScriptedRequest) -> Any:
        if r.tag.role == "challenger":
            return {"material_weakness": True, "gap_type": "unresolved_option_conflict", "challenge": next(replies)}
        return {"reasoning": "generalist reasons", "answer": "A"}

    return run(cond("generalist", c=1), Q4, responder)


def test_a_leaking_challenge_is_reasked_once_and_the_clean_rewrite_is_used() -> None:
    result, client = _generalist(["A", "REWRITE-TOKEN: the ECG timing was never discussed."])
    steps = [(e.role, e.step) for e in result.events if e.kind == "call"]
    assert steps == [("generalist", "initial"), ("challenger", "critique"), ("challenger", "critique:rewrite"),
                     ("generalist", "reconsider")]
    rewrite = next(r for r in client.requests if r.tag.step == "critique:rewrite")
    assert "names or implies an option" in rewrite.last  # the re-ask says why
    first, second = (e for e in result.events if e.role == "challenger")
    assert first.data["answer_leak"] is True and first.data["rewrite_requested"] is True
    assert "answer_redacted" not in second.data
    reconsider = client.requests[-1].last
    assert "REWRITE-TOKEN" in reconsider and "[Challenge] A\n" not in reconsider + "\n"


def test_a_challenge_that_still_leaks_after_the_reask_is_redacted() -> None:
    result, client = _generalist(["A", "(C) fits better."])
    challenger = [e for e in result.events if e.role == "challenger"]
    assert [e.step for e in challenger] == ["critique", "critique:rewrite"]  # re-asked once, not twice
    assert challenger[-1].data["answer_redacted"] is True
    reconsider = client.requests[-1].last
    challenge_line = next(line for line in reconsider.splitlines() if line.startswith("[Challenge]"))
    assert not leaks(challenge_line.removeprefix("[Challenge]").strip(), Q4.options)
    assert "(C) fits better" not in reconsider


def test_a_clean_challenge_is_not_reasked() -> None:
    result, _ = _generalist(["The ECG timing was never discussed."])
    assert [e.step for e in result.events if e.role == "challenger"] == ["critique"]
