"""`dataset: {source: hf}`: local Hugging Face datasets through the `datasets` library, offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.datasets import load_dataset
from medpanel.experiments.run.scenario import Scenario

datasets = pytest.importorskip("datasets", reason="the [hf] extra is not installed")

MEDQA = [{"question": "A 30-year-old has goiter. Which?", "options": {"A": "Graves", "B": "Hashimoto", "C": "MNG",
                                                                      "D": "Cancer"},
          "answer_idx": "B", "answer": "Hashimoto", "meta_info": "step1"},
         {"question": "Which artery?", "options": {"A": "LAD", "B": "LCx", "C": "RCA", "D": "PDA"},
          "answer_idx": "C", "answer": "RCA", "meta_info": "step2"}]
MEDMCQA = [{"id": "m-1", "question": "Vitamin for night blindness?", "opa": "A vit", "opb": "B12", "opc": "C",
            "opd": "D", "cop": 0, "exp": "Vitamin A deficiency causes night blindness."},
           {"id": "m-2", "question": "Largest organ?", "opa": "Liver", "opb": "Skin", "opc": "Brain", "opd": "Lung",
            "cop": 1, "exp": "Skin."}]
PUBMEDQA = [{"pubid": 101, "question": "Does aspirin prevent adenomas?",
             "context": {"contexts": ["Background text.", "Results text."], "labels": ["B", "R"]},
             "long_answer": "Yes, aspirin reduced recurrence.", "final_decision": "yes"},
            {"pubid": 102, "question": "Do statins cure flu?", "context": {"contexts": ["Trial."], "labels": ["R"]},
             "long_answer": "No.", "final_decision": "no"}]
MMLU = [{"question": "Which bone is in the arm?", "subject": "anatomy", "choices": ["Femur", "Humerus", "Tibia",
                                                                                   "Fibula"], "answer": 1},
        {"question": "Gene on chromosome X?", "subject": "medical_genetics", "choices": ["DMD", "CFTR", "HBB", "BRCA1"],
         "answer": 0}]


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _load(path: Path, **kw: Any) -> list[Any]:
    return load_dataset("hf", str(path), kw.pop("subsets", None), None, 42, **kw)


def test_medqa_preset_from_a_save_to_disk_folder_with_splits(tmp_path: Path) -> None:
    folder = tmp_path / "medqa"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(MEDQA[:1]),
                          "test": datasets.Dataset.from_list(MEDQA)}).save_to_disk(str(folder))
    qs = _load(folder, preset="medqa")
    assert [(q.dataset, q.qid, q.gold, list(q.options)) for q in qs] == [
        ("medqa", "0", ("B",), ["A", "B", "C", "D"]), ("medqa", "1", ("C",), ["A", "B", "C", "D"])]
    assert qs[0].text == MEDQA[0]["question"] and qs[0].options["B"] == "Hashimoto"
    assert len(_load(folder, preset="medqa", split="train")) == 1
    with pytest.raises(UserError, match="no split 'validation'"):
        _load(folder, preset="medqa", split="validation")


def test_medmcqa_preset_from_parquet_never_reads_the_explanation(tmp_path: Path) -> None:
    pq = tmp_path / "medmcqa.parquet"
    datasets.Dataset.from_list(MEDMCQA).to_parquet(str(pq))
    qs = _load(pq, preset="medmcqa")
    assert [(q.qid, q.gold) for q in qs] == [("m-1", ("A",)), ("m-2", ("B",))]
    assert qs[1].options == {"A": "Liver", "B": "Skin", "C": "Brain", "D": "Lung"}
    assert all("night blindness." not in q.model_dump_json() for q in qs[1:]) and "exp" not in qs[0].text


def test_pubmedqa_preset_shows_the_abstract_and_hides_the_long_answer(tmp_path: Path) -> None:
    qs = _load(_jsonl(tmp_path / "pqa.jsonl", PUBMEDQA), preset="pubmedqa")
    assert [(q.qid, q.gold) for q in qs] == [("101", ("A",)), ("102", ("B",))]
    assert qs[0].options == {"A": "yes", "B": "no", "C": "maybe"}
    assert qs[0].text == "Background text.\n\nResults text.\n\nDoes aspirin prevent adenomas?"
    assert "reduced recurrence" not in qs[0].model_dump_json()


def test_mmlu_preset_names_each_subject_and_subsets_select(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "mmlu.jsonl", MMLU)
    qs = _load(path, preset="mmlu")
    assert [(q.dataset, q.gold, q.options["B"]) for q in qs] == [("anatomy", ("B",), "Humerus"),
                                                                ("medical_genetics", ("A",), "CFTR")]
    assert [q.dataset for q in _load(path, preset="mmlu", subsets=["medical_genetics"])] == ["medical_genetics"]


def test_a_custom_mapping_overrides_a_preset_key(tmp_path: Path) -> None:
    rows = [{"stem": "Q?", "opts": ["x", "y", "z"], "key": 2, "uid": "u1"}]
    qs = _load(_jsonl(tmp_path / "own.jsonl", rows),
               fields={"question": "stem", "options": "opts", "answer": "key", "index_base": 1, "id": "uid"})
    assert [(q.dataset, q.qid, q.gold) for q in qs] == [("own", "u1", ("B",))]


def test_a_hub_name_without_a_local_copy_says_how_to_save_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as err:
        _load(Path("GBaker/MedQA-USMLE-4-options"), preset="medqa")
    msg = str(err.value)
    assert "nothing is downloaded" in msg and "save_to_disk" in msg and "GBaker/MedQA-USMLE-4-options" in msg
    assert "\n" not in msg


def test_bad_mappings_are_one_line_naming_the_field(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "mmlu.jsonl", MMLU)
    with pytest.raises(UserError, match="no column 'answer_idx'") as err:
        _load(path, preset="medqa", fields={"options": "choices"})
    assert err.value.field == "dataset.fields"
    with pytest.raises(UserError, match="outside the 4 options"):
        _load(_jsonl(tmp_path / "bad.jsonl", [{**MMLU[0], "answer": 7}]), preset="mmlu")


def test_the_scenario_block_reaches_the_loader(tmp_path: Path) -> None:
    from medpanel.experiments.run.plan import make_plan

    pq = tmp_path / "medmcqa.parquet"
    datasets.Dataset.from_list(MEDMCQA).to_parquet(str(pq))
    sc = Scenario.model_validate({"name": "hf", "pipeline": "generalist", "model": {"backend": "scripted"},
                                  "dataset": {"source": "hf", "path": str(pq), "preset": "medmcqa", "limit": 1}})
    plan = make_plan(sc, base_dir=tmp_path)
    assert len(plan.questions) == 1 and plan.questions[0].dataset == "medmcqa"
