"""Whether an item is multi-answer comes from the data's declared type, never from its gold."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.types import Question, score
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.sources.datasets import load_dataset

from .scripted_helpers import cond, run

OPTIONS = {"A": "Amoxicillin", "B": "Gentamicin", "C": "Ceftriaxone", "D": "Doxycycline"}


def _record(qid: str, gold: str, **extra: Any) -> dict[str, Any]:
    return {"realidx": qid, "question": "Which of these is a beta-lactam?", "options": OPTIONS, "answer_idx": gold,
            **extra}


def _load(tmp_path: Path, records: list[dict[str, Any]], **kwargs: Any) -> list[Question]:
    f = tmp_path / "items.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return load_dataset("jsonl", str(f), None, None, seed=0, **kwargs)


def _requests(question: Question) -> list[Any]:
    _, client = run(cond("generalist", c=1), question, lambda r: {"reasoning": "r", "answer": "A"}
                    if r.tag.role == "generalist" else {"material_weakness": False, "gap_type": "none",
                                                        "challenge": ""})
    return client.requests


def test_two_gold_letters_without_a_declared_type_are_prompted_single_best(tmp_path: Path) -> None:
    two, one = _load(tmp_path, [_record("two", "A,C"), _record("one", "A")])
    assert two.gold == ("A", "C") and not two.multi_answer
    sent_two, sent_one = _requests(two), _requests(one)
    first = sent_two[0]
    assert "Select the single best option." in first.last and "Select ALL" not in first.last
    assert first.model is not None and first.model.model_json_schema()["properties"]["answer"].get("type") != "array"
    # Nothing sent depends on the gold: the same item with another gold sends the very same requests.
    assert [r.messages for r in sent_two] == [r.messages for r in sent_one]
    assert [r.model.model_json_schema() if r.model else None for r in sent_two] == \
        [r.model.model_json_schema() if r.model else None for r in sent_one]
    # Scored as documented: one letter never equals a two-letter gold set (exact_set); any_of accepts it.
    assert not score(("A",), two.gold, "exact_set") and score(("A",), two.gold, "any_of")


def test_a_declared_multi_answer_item_is_prompted_select_all(tmp_path: Path) -> None:
    (q,) = _load(tmp_path, [_record("m", "A,C", multi_answer=True)])
    assert q.multi_answer
    first = _requests(q)[0]
    assert "Select ALL correct options." in first.last
    assert first.model is not None and first.model.model_json_schema()["properties"]["answer"]["type"] == "array"
    # A declared multi-answer item with one gold letter is still select-all: the type is the data's.
    (single_gold,) = _load(tmp_path, [_record("m1", "A", multi_answer=True)])
    assert single_gold.multi_answer and "Select ALL correct options." in _requests(single_gold)[0].last


def test_a_dataset_setting_declares_every_item(tmp_path: Path) -> None:
    items = _load(tmp_path, [_record("1", "A"), _record("2", "A,C")], multi_answer=True)
    assert all(q.multi_answer for q in items)
    items = _load(tmp_path, [_record("1", "A", multi_answer=True)], multi_answer=False)
    assert not items[0].multi_answer


def test_a_malformed_declared_type_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="multi_answer"):
        _load(tmp_path, [_record("1", "A", multi_answer="yes")])


def test_the_sample_set_declares_its_multi_answer_item() -> None:
    raw = Path(__file__).parents[1] / "experiments" / "data" / "sample_questions.jsonl"
    records = [json.loads(line) for line in raw.read_text(encoding="utf-8").splitlines() if line.strip()]
    declared = [r["realidx"] for r in records if r.get("multi_answer") is True]
    loaded = [q.qid for q in load_dataset("sample", None, None, None, seed=0) if q.multi_answer]
    assert declared == loaded == ["s06"]
