"""Typed reply models: answer replies share `AnswerReply`, numbered slots read as lists, and the
shape each model is shown stays what it was (the texts below are the requests' own words)."""

from __future__ import annotations

from medpanel.agents.model.structured import (
    AnswerReply,
    answer_model,
    format_instructions,
    parse_reply,
    strict_response_format,
)
from medpanel.agents.pipelines.multiagent_common import labelled, numbered_model
from medpanel.methods.clear.roles import assessor
from medpanel.methods.kamac.roles import kamac
from medpanel.methods.mdagents.roles import mdagents

SHAPE = "Reply with only a JSON object of this shape:\n"


def test_an_answer_asked_without_reasoning_shows_and_records_none_and_reads_empty() -> None:
    model = answer_model(["A", "B"], reasoning=False)
    assert issubclass(model, AnswerReply)
    assert format_instructions(model) == SHAPE + '{"answer": "<one of A, B>"}\n- answer: The single best option letter.'
    schema = strict_response_format(model)["json_schema"]["schema"]
    assert schema["properties"].keys() == {"answer"} and schema["required"] == ["answer"]
    # A reasoning key it was not asked for is ignored, as any unknown key is (not kept, not validated).
    parsed, reason = parse_reply('{"reasoning": 5, "answer": "B"}', model)
    assert reason is None and parsed is not None
    assert parsed.answer == "B" and parsed.reasoning == ""
    assert parsed.model_dump() == {"answer": "B"}


def test_a_reasoned_answer_keeps_reasoning_first_and_reads_it() -> None:
    model = answer_model(["A", "B", "C"], multi=True)
    assert format_instructions(model) == (SHAPE + '{"reasoning": "<reasoning>", "answer": ["<one of A, B, C>"]}\n'
                                          "- reasoning: Brief reasoning, at most 4 sentences.\n"
                                          "- answer: All correct letters.")
    parsed, _ = parse_reply('{"reasoning": "ECG first.", "answer": ["C", "A"]}', model)
    assert parsed is not None and parsed.reasoning == "ECG first." and parsed.answer == ["C", "A"]
    assert parse_reply('{"answer": ["A"]}', model)[0] is None  # asked for, so required


def test_numbered_slots_read_as_a_list_in_order_and_blanks_are_named_by_place() -> None:
    model = numbered_model("InitialRecruit", "expert", 3, "A specialty.", note=(str, ...))
    parsed, _ = parse_reply('{"expert_1": "cardiology", "expert_2": " ", "expert_3": "nephrology", "note": "x"}',
                            model)
    assert parsed is not None
    assert parsed.slots == ["cardiology", " ", "nephrology"]  # `note` is not a slot
    assert labelled(parsed.slots, "expert") == ["cardiology", "expert 2", "nephrology"]


def test_the_mdt_recruit_keeps_its_numbered_shape_and_reads_experts_and_lead() -> None:
    model = mdagents.recruit_model(3)
    assert format_instructions(model) == (
        SHAPE + '{"expert_1": "<expert 1>", "expert_2": "<expert 2>", "expert_3": "<expert 3>", '
        '"lead": "<one of 1, 2, 3>"}\n- expert_1: A specialty.\n- expert_2: A specialty.\n- expert_3: A specialty.\n'
        "- lead: The number of the expert who leads the team.")
    parsed, _ = parse_reply('{"expert_1": "a", "expert_2": "b", "expert_3": "c", "lead": 2}', model)
    assert parsed is not None and parsed.slots == ["a", "b", "c"] and parsed.lead == 2


def test_the_gap_recruit_reads_its_count_and_slots() -> None:
    model = kamac.gap_recruit_model(2)
    assert format_instructions(model) == (
        SHAPE + '{"count": "<one of 0, 1, 2>", "expert_1": "<expert 1>", "expert_2": "<expert 2>"}\n'
        "- count: How many specialists to recruit (0 to skip).\n- expert_1: A specialty, or empty.\n"
        "- expert_2: A specialty, or empty.")
    parsed, _ = parse_reply('{"count": 1, "expert_1": "hepatology", "expert_2": ""}', model)
    assert parsed is not None and parsed.count == 1 and parsed.slots == ["hepatology", ""]


def test_the_ict_recruit_reads_teams_of_members() -> None:
    model = mdagents.ict_model(2, 2)
    assert format_instructions(model).startswith(
        SHAPE + '{"team_1_name": "<team 1 name>", "team_1_member_1": "<team 1 member 1>", '
        '"team_1_member_2": "<team 1 member 2>", "team_2_name": "<team 2 name>", ')
    parsed, _ = parse_reply('{"team_1_name": "Initial", "team_1_member_1": "a", "team_1_member_2": "b", '
                            '"team_2_name": "", "team_2_member_1": "c", "team_2_member_2": "d"}', model)
    assert parsed is not None and parsed.teams == [("Initial", ["a", "b"]), ("", ["c", "d"])]


def test_quality_labels_read_in_document_order() -> None:
    model = assessor.labels_model(3)
    parsed, _ = parse_reply('{"P2": "low", "P1": "high", "P3": "medium"}', model)
    assert parsed is not None and parsed.levels == ["high", "low", "medium"]
    assert list(parsed.model_dump()) == ["P1", "P2", "P3"]  # the record keeps the documents' labels by name
