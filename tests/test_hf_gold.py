"""Golds of Hugging Face files whose options are letters, numbers or repeated texts, in every preset's layouts.

Each item below has its options and its published gold letter. Every layout writes the items in its
own schema (GBaker's letter->text dict, bigbio's `*_source` {key, value} list and `*_bigbio_qa`
text answers, MedMCQA's `opa`..`opd` with a ClassLabel or 1-based `cop`, MMLU's `choices` with a
ClassLabel), and the stored gold must be the published one. A gold that
no reading of the layout can pin to one option is refused in one line naming the row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.sources.datasets import load_dataset

datasets = pytest.importorskip("datasets", reason="the [hf] extra is not installed")

Item = tuple[list[str], str]
"""An item's option texts and its published gold letter."""

LETTER_VALUED: list[Item] = [
    (["B", "C", "D", "E"], "A"),  # a MedQA item: published answer_idx A, whose text is "B"
    *[(["O", "A", "B", "AB"], gold) for gold in "ABCD"],  # blood groups: each gold once ...
    *[(["AB", "B", "A", "O"], gold) for gold in "ABCD"],  # ... and in the reverse order
]
NUMERIC: list[Item] = [(["1", "2", "3", "4"], "C"), (["4", "3", "2", "1"], "A"), (["0", "1", "2", "3"], "B"),
                       (["3", "0", "1", "2"], "D"), (["10 mg", "5 mg", "2.5 mg", "1 mg"], "D")]
REPEATED: list[Item] = [(["Aspirin", "Aspirin", "Heparin", "Warfarin"], "C"),
                        (["Aspirin", "Aspirin", "Heparin", "Warfarin"], "B"),  # a letter or an index names it
                        (["None of the above", "Iron", "Zinc", "None of the above"], "B")]
ITEMS = {"letter-valued": LETTER_VALUED, "numeric": NUMERIC, "repeated-texts": REPEATED}


def _letter(gold: str) -> int:
    return "ABCD".index(gold)


def gbaker(items: list[Item]) -> list[dict[str, Any]]:
    return [{"question": f"Question {i}?", "answer": opts[_letter(g)], "options": dict(zip("ABCD", opts, strict=True)),
             "meta_info": "step1", "answer_idx": g, "metamap_phrases": ["x"]} for i, (opts, g) in enumerate(items)]


def bigbio_source(items: list[Item]) -> list[dict[str, Any]]:
    return [{"meta_info": "step1", "question": f"Question {i}?", "answer_idx": g, "answer": opts[_letter(g)],
             "options": [{"key": k, "value": v} for k, v in zip("ABCD", opts, strict=True)]}
            for i, (opts, g) in enumerate(items)]


def bigbio_qa(items: list[Item]) -> list[dict[str, Any]]:
    return [{"id": str(i), "question_id": str(i), "document_id": str(i), "question": f"Question {i}?",
             "type": "multiple_choice", "choices": opts, "context": "", "answer": [opts[_letter(g)]]}
            for i, (opts, g) in enumerate(items)]


def medmcqa(items: list[Item], base: int = 0) -> list[dict[str, Any]]:
    return [{"id": f"m-{i}", "question": f"Question {i}?", "opa": opts[0], "opb": opts[1], "opc": opts[2],
             "opd": opts[3], "cop": _letter(g) + base, "choice_type": "single", "exp": "explanation",
             "subject_name": "Medicine", "topic_name": None} for i, (opts, g) in enumerate(items)]


def mmlu(items: list[Item]) -> list[dict[str, Any]]:
    return [{"question": f"Question {i}?", "subject": "anatomy", "choices": opts, "answer": _letter(g)}
            for i, (opts, g) in enumerate(items)]


def _medmcqa_features() -> Any:
    s = datasets.Value("string")
    return datasets.Features({"id": s, "question": s, "opa": s, "opb": s, "opc": s, "opd": s,
                              "cop": datasets.ClassLabel(names=["a", "b", "c", "d"]), "choice_type": s, "exp": s,
                              "subject_name": s, "topic_name": s})


def _mmlu_features() -> Any:
    s = datasets.Value("string")
    return datasets.Features({"question": s, "subject": s, "choices": datasets.Sequence(s),
                              "answer": datasets.ClassLabel(names=["A", "B", "C", "D"])})


def _parquet(rows: list[dict[str, Any]], path: Path, features: Any = None) -> Path:
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(path))
    return path


def _saved(rows: list[dict[str, Any]], path: Path, features: Any = None) -> Path:
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows, features=features)}).save_to_disk(str(path))
    return path


def _jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


Writer = Callable[[list[Item], Path], Path]
LAYOUTS: dict[str, tuple[str, Writer, bool]] = {
    # name: (preset, write the items in the layout's schema, whether its gold is an option's text)
    "GBaker/MedQA-USMLE-4-options parquet": ("medqa", lambda it, d: _parquet(gbaker(it), d / "t.parquet"), False),
    "bigbio/med_qa *_source jsonl": ("medqa", lambda it, d: _jsonl(bigbio_source(it), d / "s.jsonl"), False),
    "bigbio/med_qa *_bigbio_qa save_to_disk": ("medqa", lambda it, d: _saved(bigbio_qa(it), d / "qa"), True),
    "bigbio/med_qa *_bigbio_qa parquet": ("medqa", lambda it, d: _parquet(bigbio_qa(it), d / "qa.parquet"), True),
    "openlifescienceai/medmcqa parquet": (
        "medmcqa", lambda it, d: _parquet(medmcqa(it), d / "v.parquet", _medmcqa_features()), False),
    "MedMCQA release json (1-based)": ("medmcqa", lambda it, d: _jsonl(medmcqa(it, 1), d / "dev.json"), False),
    "cais/mmlu save_to_disk": ("mmlu", lambda it, d: _saved(mmlu(it), d / "mmlu", _mmlu_features()), False),
}


def _load(path: Path, preset: str | None = None, fields: dict[str, Any] | None = None) -> list[Any]:
    return load_dataset("hf", str(path), None, None, 42, preset=preset, fields=fields)


def _fits(items: list[Item], text_gold: bool) -> list[Item]:
    """The items a text gold can name: its text is on one option only."""
    return [it for it in items if not text_gold or it[0].count(it[0][_letter(it[1])]) == 1]


@pytest.mark.parametrize("kind", list(ITEMS))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_stored_gold_is_the_published_one(layout: str, kind: str, tmp_path: Path) -> None:
    preset, write, text_gold = LAYOUTS[layout]
    items = _fits(ITEMS[kind], text_gold)
    if layout.startswith("MedMCQA release") and not any(_letter(g) == 3 for _, g in items):
        items = [*items, (["w", "x", "y", "z"], "D")]  # a cop of 4 proves the release's 1-based index
    questions = _load(write(items, tmp_path), preset)
    assert [(q.gold, q.options[q.gold[0]]) for q in questions] == [((g, ), o[_letter(g)]) for o, g in items]
    assert [list(q.options.values()) for q in questions] == [o for o, _ in items]


def test_a_letter_valued_bigbio_qa_set_is_stored_with_every_published_gold(tmp_path: Path) -> None:
    """The blood-group set: read as letters first, half its golds named the wrong group."""
    items = [(["O", "A", "B", "AB"], g) for g in "ABCD"] + [(["O", "A", "B", "AB"], g) for g in "DCBA"]
    questions = _load(_jsonl(bigbio_qa(items), tmp_path / "blood.jsonl"), "medqa")
    assert [q.options[q.gold[0]] for q in questions] == ["O", "A", "B", "AB", "AB", "B", "A", "O"]


@pytest.mark.parametrize("layout", [n for n, (_, _, text_gold) in LAYOUTS.items() if text_gold])
def test_a_text_gold_on_two_options_is_refused_naming_the_row(layout: str, tmp_path: Path) -> None:
    _, write, _ = LAYOUTS[layout]
    items = [(["Iron", "Zinc", "Copper", "Lead"], "B"), (["Aspirin", "Aspirin", "Heparin", "Warfarin"], "A")]
    with pytest.raises(UserError) as err:
        _load(write(items, tmp_path), "medqa")
    msg = str(err.value)
    assert "\n" not in msg and "(row 1, id '1')" in msg and "'Aspirin' is the text of options A and B" in msg


def test_an_own_mapping_refuses_a_gold_that_is_one_options_letter_and_anothers_text(tmp_path: Path) -> None:
    rows = [{"stem": "Blood group?", "opts": ["O", "A", "B", "AB"], "key": "A", "uid": "b-1"}]
    path = _jsonl(rows, tmp_path / "own.jsonl")
    mapping = {"question": "stem", "options": "opts", "answer": "key", "id": "uid"}
    with pytest.raises(UserError) as err:
        _load(path, fields=mapping)
    msg = str(err.value)
    assert "\n" not in msg and "(row 0, id 'b-1')" in msg and "answer_form" in msg
    assert [q.gold for q in _load(path, fields={**mapping, "answer_form": "text"})] == [("B",)]
    assert [q.gold for q in _load(path, fields={**mapping, "answer_form": "letter"})] == [("A",)]
    # A preset's form belongs to its own answer column: GBaker's `answer` (the text) mapped instead is read as text.
    gb = _parquet(gbaker([(["O", "A", "B", "AB"], "C")]), tmp_path / "t.parquet")
    assert [q.gold for q in _load(gb, "medqa", fields={"answer": "answer", "answer_form": "text"})] == [("C",)]
    with pytest.raises(UserError, match="answer_form"):
        _load(gb, "medqa", fields={"answer": "answer"})

