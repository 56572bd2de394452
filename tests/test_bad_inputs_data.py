"""Hostile dataset files: repeated ids, nulls, empty texts and numbers where text belongs, in every loader.

Each case writes a real file in a real published layout (a `save_to_disk` folder of Arrow files, a
parquet file, a JSON or JSONL file, as `source: hf` reads them; the JSONL of `source: jsonl`; a
free-text task file) and runs the command a user would (`medpanel validate`, or `medpanel run`)
through `medpanel.experiments.cli.main`, like the first probe (tests/test_bad_inputs.py, whose
checks it reuses). Every case must end in exit 2 with one `error:` line that names the file and what
to fix: a null question is never sent as "None", a repeated id never leaves a run that cannot finish.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.test_bad_inputs import QUESTION, invoke, shape_problem

datasets = pytest.importorskip("datasets", reason="the [hf] extra is not installed")

SCENARIO = """name: hostile
pipeline: generalist
dataset: {dataset}
model: {{backend: scripted}}
run: {{workers: 1}}
"""
FREETEXT = ("name: ft\npipeline: clear\nvariants: [clear-default]\ndataset: {source: freetext, path: t.jsonl}\n"
            "model: {backend: scripted}\n")


def medmcqa_row(i: int, **change: Any) -> dict[str, Any]:
    """openlifescienceai/medmcqa's columns."""
    return {"id": f"m-{i}", "question": f"Question {i}?", "opa": "Iron", "opb": "Zinc", "opc": "Copper", "opd": "Lead",
            "cop": i % 4, "choice_type": "single", "exp": "explanation", "subject_name": "Biochemistry",
            "topic_name": "Minerals", **change}


def gbaker_row(i: int, **change: Any) -> dict[str, Any]:
    """GBaker/MedQA-USMLE-4-options' columns."""
    return {"question": f"Question {i}?", "answer": "Zinc", "options": {"A": "Iron", "B": "Zinc", "C": "Copper",
                                                                         "D": "Lead"},
            "meta_info": "step1", "answer_idx": "B", "metamap_phrases": ["mineral"], **change}


def bigbio_qa_row(i: int, **change: Any) -> dict[str, Any]:
    """bigbio/med_qa `*_bigbio_qa`'s columns."""
    return {"id": str(i), "question_id": str(i), "document_id": str(i), "question": f"Question {i}?",
            "type": "multiple_choice", "choices": ["Iron", "Zinc", "Copper", "Lead"], "context": "",
            "answer": ["Zinc"], **change}


def pubmedqa_row(i: int, **change: Any) -> dict[str, Any]:
    """qiaojin/PubMedQA pqa_labeled's columns."""
    return {"pubid": 1000 + i, "question": f"Does {i} help?",
            "context": {"contexts": ["Background.", "Results."], "labels": ["BACKGROUND", "RESULTS"],
                        "meshes": ["Humans"]}, "long_answer": "It does.", "final_decision": "yes", **change}


def mmlu_row(i: int, **change: Any) -> dict[str, Any]:
    """cais/mmlu's columns."""
    return {"question": f"Question {i}?", "subject": "anatomy", "choices": ["Femur", "Humerus", "Tibia", "Fibula"],
            "answer": i % 4, **change}


def parquet(rows: list[dict[str, Any]]) -> Callable[[Path], str]:
    def write(root: Path) -> str:
        datasets.Dataset.from_list(rows).to_parquet(str(root / "data.parquet"))
        return "data.parquet"
    return write


def saved(rows: list[dict[str, Any]]) -> Callable[[Path], str]:
    def write(root: Path) -> str:
        datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(root / "saved"))
        return "saved"
    return write


def jsonl(rows: list[dict[str, Any]], name: str = "data.jsonl") -> Callable[[Path], str]:
    def write(root: Path) -> str:
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return name
    return write


@dataclass
class Case:
    id: str
    write: Callable[[Path], str]
    """Writes the data under the folder; returns its path as the scenario names it."""
    dataset: str
    """The scenario's dataset block, `{path}` standing for the file."""
    expect: tuple[str, ...]
    """What the one error line must name (case-insensitive): the field and what is wrong."""
    command: str = "validate"


def hf(preset: str) -> str:
    return f"{{source: hf, path: {{path}}, preset: {preset}}}"


JSONL = "{source: jsonl, path: {path}}"
CASES = [
    # -- repeated ids: a pair would be dropped and the run never finish --
    Case("hf-medmcqa-parquet-duplicate-id", parquet([medmcqa_row(0), medmcqa_row(1, id="m-0")]), hf("medmcqa"),
         ("duplicate id 'm-0'", "row 0")),
    Case("hf-bigbio-qa-saved-duplicate-id", saved([bigbio_qa_row(0), bigbio_qa_row(1), bigbio_qa_row(2, id="1")]),
         hf("medqa"), ("duplicate id '1'", "row 1")),
    Case("hf-pubmedqa-json-duplicate-pubid", jsonl([pubmedqa_row(0), pubmedqa_row(0)], "pqa.json"), hf("pubmedqa"),
         ("duplicate id '1000'",)),
    Case("hf-medmcqa-run-duplicate-id", parquet([medmcqa_row(0), medmcqa_row(1, id="m-0")]), hf("medmcqa"),
         ("duplicate id 'm-0'",), command="run"),
    # -- a null, empty or non-text stem --
    Case("hf-medmcqa-parquet-null-question", parquet([medmcqa_row(0), medmcqa_row(1, question=None)]),
         hf("medmcqa"), ("question is null", "row 1")),
    Case("hf-gbaker-jsonl-blank-question", jsonl([gbaker_row(0, question="   ")]), hf("medqa"),
         ("question is empty",)),
    Case("hf-bigbio-qa-saved-null-question", saved([bigbio_qa_row(0, question=None)]), hf("medqa"),
         ("question is null",)),
    Case("hf-mmlu-json-numeric-question", jsonl([mmlu_row(0, question=42)], "mmlu.json"), hf("mmlu"),
         ("question is int", "not text")),
    Case("hf-gbaker-parquet-nul-in-question", parquet([gbaker_row(0, question="Which\x00 one?")]), hf("medqa"),
         ("nul character", "question")),
    # -- null, empty or non-text options --
    Case("hf-medmcqa-parquet-empty-option", parquet([medmcqa_row(0, opc="")]), hf("medmcqa"),
         ("option c is empty",)),
    Case("hf-medmcqa-jsonl-null-option", jsonl([medmcqa_row(0, opd=None), medmcqa_row(1)]), hf("medmcqa"),
         ("option d is null",)),
    Case("hf-gbaker-parquet-null-option-between", parquet([gbaker_row(0, options={"A": "Iron", "B": None,
                                                                                  "C": "Copper", "D": "Lead"})]),
         hf("medqa"), ("option b is null",)),
    Case("hf-bigbio-qa-jsonl-null-choice", jsonl([bigbio_qa_row(0, choices=["Iron", None, "Zinc", "Lead"])]),
         hf("medqa"), ("option b is null",)),
    Case("hf-mmlu-json-numeric-choices", jsonl([mmlu_row(0, choices=[1, 2, 3, 4])], "mmlu.json"), hf("mmlu"),
         ("option a is int", "not text")),
    Case("hf-gbaker-jsonl-numbered-option-keys", jsonl([gbaker_row(0, options={"1": "Iron", "2": "Zinc"},
                                                                   answer_idx="2")]),
         hf("medqa"), ("option key '1'",)),
    # -- a null or empty gold --
    Case("hf-gbaker-parquet-null-answer", parquet([gbaker_row(0), gbaker_row(1, answer_idx=None)]), hf("medqa"),
         ("answer is null", "row 1")),
    Case("hf-gbaker-jsonl-empty-answer", jsonl([gbaker_row(0, answer_idx="")]), hf("medqa"), ("answer is empty",)),
    Case("hf-bigbio-qa-jsonl-null-in-answer-list", jsonl([bigbio_qa_row(0, answer=[None])]), hf("medqa"),
         ("answer is null",)),
    Case("hf-pubmedqa-parquet-null-decision", parquet([pubmedqa_row(0, final_decision=None), pubmedqa_row(1)]),
         hf("pubmedqa"), ("answer is null",)),
    # -- a null, empty or long id, a null subject, a null passage --
    Case("hf-pubmedqa-parquet-null-pubid", parquet([pubmedqa_row(0), pubmedqa_row(1, pubid=None)]), hf("pubmedqa"),
         ("id is null", "row 1")),
    Case("hf-medmcqa-saved-empty-id", saved([medmcqa_row(0, id="")]), hf("medmcqa"), ("id is empty",)),
    Case("hf-medmcqa-jsonl-long-id", jsonl([medmcqa_row(0, id="m" * 600)]), hf("medmcqa"), ("longer than 512",)),
    Case("hf-mmlu-parquet-null-subject", parquet([mmlu_row(0), mmlu_row(1, subject=None)]), hf("mmlu"),
         ("dataset is null", "dataset.fields.dataset")),
    Case("hf-pubmedqa-json-null-passage", jsonl([pubmedqa_row(0, context={"contexts": ["Background.", None],
                                                                         "labels": ["B", "R"], "meshes": []})],
                                                "pqa.json"),
         hf("pubmedqa"), ("context passage 2 is null",)),
    # -- the free-text task file: ids and subsets are text, a turn has words --
    Case("freetext-object-id", jsonl([{"id": {"n": 1}, "prompt": "Hi?", "rubrics": [{"criterion": "x", "points": 1}]}],
                                     "t.jsonl"), "", ("id",)),
    Case("freetext-numeric-dataset", jsonl([{"id": "t1", "dataset": 5, "prompt": "Hi?",
                                             "rubrics": [{"criterion": "x", "points": 1}]}], "t.jsonl"), "",
         ("dataset",)),
    Case("freetext-empty-turn", jsonl([{"id": "t1", "prompt": "  ", "rubrics": [{"criterion": "x", "points": 1}]}],
                                      "t.jsonl"), "", ("turn is empty",)),
    # -- the MedAgentsBench JSONL: a blank option --
    Case("jsonl-blank-option", jsonl([{**QUESTION, "options": {"A": "x", "B": " "}}], "q.jsonl"), JSONL,
         ("option b has no text",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_hostile_dataset_file_is_one_line_exit_2(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = case.write(tmp_path)
    if case.dataset:
        body = SCENARIO.format(dataset=case.dataset.replace("{path}", path))
    else:
        body = FREETEXT.replace("t.jsonl", path)
    (tmp_path / "s.yaml").write_text(body, encoding="utf-8")
    argv = [case.command, "s.yaml", *(["--run-dir", "r", "--quiet"] if case.command == "run" else [])]
    res = invoke(argv)
    problem = shape_problem(res)
    assert problem is None, f"{case.id}: {problem}"
    line = res.err.lower()
    assert path.lower() in line, f"{case.id}: the line does not name the file: {res.err}"
    for word in case.expect:
        assert word.lower() in line, f"{case.id}: the line does not say {word!r}: {res.err}"
    if case.command == "run":
        assert not (tmp_path / "r").exists(), "a refused dataset left a run directory"

