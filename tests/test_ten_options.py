"""Ten options (MMLU-Pro's A-J) wherever letters are handled: the reply schema, the parser, the
Challenger's answer screen, CLEAR's pathways and the stored, reported answer."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from medpanel.agents.model.scripted import ScriptedRequest
from medpanel.agents.model.structured import answer_model, letters_of
from medpanel.agents.types import Question

from .scripted_helpers import cond, run

TEN = dict(zip("ABCDEFGHIJ", ["Vitamin A", "Vitamin B1", "Vitamin B12", "Vitamin C", "Vitamin D", "Vitamin E",
                              "Vitamin K", "Folate", "Niacin", "Biotin"], strict=True))
Q10 = Question(dataset="mmlu-pro.health", qid="7001", text="Deficiency causing pellagra?", options=TEN, gold=("I",))


def test_the_reply_schema_takes_every_letter_up_to_j_and_no_other() -> None:
    model = answer_model(list(TEN))
    assert letters_of(model.model_validate({"reasoning": "r", "answer": "J"})) == ("J",)
    with pytest.raises(ValidationError):
        model.model_validate({"reasoning": "r", "answer": "K"})
    multi = answer_model(list(TEN), multi=True)
    assert letters_of(multi.model_validate({"reasoning": "r", "answer": ["J", "F", "F"]})) == ("F", "J")
    schema = str(model.model_json_schema())
    assert "'J'" in schema and "'K'" not in schema


def test_a_ten_option_item_through_the_generalist_and_the_challenger_screen() -> None:
    replies = iter(["The answer is I: niacin deficiency explains the dermatitis.",
                    "REWRITE: was the diarrhoea weighed?"])

    def responder(r: ScriptedRequest) -> Any:
        if r.tag.role == "challenger":
            return {"material_weakness": True, "gap_type": "missing_differential", "challenge": next(replies)}
        return {"reasoning": "Dermatitis, diarrhoea, dementia.", "answer": "I"}

    result, client = run(cond("generalist", c=1), Q10, responder)
    assert result.answer == ("I",) and result.correct and not result.invalid
    first = next(e for e in result.events if e.role == "challenger")
    assert first.data["answer_leak"] is True  # a verdict naming option I is screened like one naming A
    assert "The answer is I" not in client.requests[-1].last
    assert "(J) Biotin" in client.requests[0].last  # every option reached the prompt


def test_a_ten_option_item_through_clear() -> None:
    def responder(r: ScriptedRequest) -> Any:
        from medpanel.agents.model.scripted import synthesize
        reply = synthesize(r.model, r.tag.step) if r.model is not None else "ok"
        if isinstance(reply, dict) and "answer" in reply:
            reply["answer"] = "J"
        return reply

    condition = cond("clear", variant="clear-default").model_copy(
        update={"settings": {"corpus": "quickstart", "k": 2, "dynamic_k": 2}})
    result, _ = run(condition, Q10, responder)
    assert result.error is None and result.answer == ("J",) and not result.correct
