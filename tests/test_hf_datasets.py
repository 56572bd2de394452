"""`dataset: {source: hf}`: local Hugging Face datasets through the `datasets` library, offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.sources.datasets import load_dataset

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
    from medpanel.experiments.run.scenario.plan import make_plan

    pq = tmp_path / "medmcqa.parquet"
    datasets.Dataset.from_list(MEDMCQA).to_parquet(str(pq))
    sc = Scenario.model_validate({"name": "hf", "pipeline": "generalist", "model": {"backend": "scripted"},
                                  "dataset": {"source": "hf", "path": str(pq), "preset": "medmcqa", "limit": 1}})
    plan = make_plan(sc, base_dir=tmp_path)
    assert len(plan.questions) == 1 and plan.questions[0].dataset == "medmcqa"


# -- the layouts as published (hf_presets.py), built with their real column types ------------------------------

def _one_line(err: pytest.ExceptionInfo[UserError]) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


BIGBIO_SOURCE = [{"meta_info": "step1", "question": "A 30-year-old has goiter. Which?", "answer_idx": "B",
                  "answer": "Hashimoto",
                  "options": [{"key": "A", "value": "Graves"}, {"key": "B", "value": "Hashimoto"},
                              {"key": "C", "value": "MNG"}, {"key": "D", "value": "Cancer"}]},
                 {"meta_info": "step2", "question": "Which artery?", "answer_idx": "D", "answer": "PDA",
                  "options": [{"key": "A", "value": "LAD"}, {"key": "B", "value": "LCx"}, {"key": "C", "value": "RCA"},
                              {"key": "D", "value": "PDA"}]}]
BIGBIO_QA = [{"id": "0", "question_id": "0", "document_id": "0", "question": "A 30-year-old has goiter. Which?",
              "type": "multiple_choice", "choices": ["Graves", "Hashimoto", "MNG", "Cancer"], "context": "",
              "answer": ["Hashimoto"]},
             {"id": "1", "question_id": "1", "document_id": "1", "question": "Which artery?", "type": "multiple_choice",
              "choices": ["LAD", "LCx", "RCA", "PDA"], "context": "", "answer": ["PDA"]}]


def _medmcqa_features() -> Any:
    """openlifescienceai/medmcqa's features: `cop` a ClassLabel of a..d."""
    value = datasets.Value("string")
    return datasets.Features({"id": value, "question": value, "opa": value, "opb": value, "opc": value, "opd": value,
                              "cop": datasets.ClassLabel(names=["a", "b", "c", "d"]), "choice_type": value,
                              "exp": value, "subject_name": value, "topic_name": value})


def _medmcqa(cops: list[int]) -> list[dict[str, Any]]:
    return [{"id": f"m-{i}", "question": f"Question {i}?", "opa": f"a{i}", "opb": f"b{i}", "opc": f"c{i}",
             "opd": f"d{i}", "cop": cop, "choice_type": "single", "exp": "secret explanation",
             "subject_name": "Anatomy", "topic_name": "Bones"} for i, cop in enumerate(cops)]


def test_bigbio_source_options_are_key_value_pairs_not_text(tmp_path: Path) -> None:
    pq = tmp_path / "med_qa_en_source.parquet"
    datasets.Dataset.from_list(BIGBIO_SOURCE).to_parquet(str(pq))
    qs = _load(pq, preset="medqa")
    assert qs[0].options == {"A": "Graves", "B": "Hashimoto", "C": "MNG", "D": "Cancer"}
    assert [q.gold for q in qs] == [("B",), ("D",)] and qs[1].options["D"] == "PDA"


@pytest.mark.parametrize("kind", ["jsonl", "save_to_disk"])
def test_bigbio_qa_choices_and_a_list_answer_load_with_the_medqa_preset(tmp_path: Path, kind: str) -> None:
    if kind == "jsonl":
        path = _jsonl(tmp_path / "med_qa_en_4options_bigbio_qa.jsonl", BIGBIO_QA)
    else:
        path = tmp_path / "bigbio_qa"
        datasets.DatasetDict({"test": datasets.Dataset.from_list(BIGBIO_QA)}).save_to_disk(str(path))
    qs = _load(path, preset="medqa")
    assert [(q.qid, q.gold, q.options["B"]) for q in qs] == [("0", ("B",), "Hashimoto"), ("1", ("D",), "LCx")]
    assert qs[0].text == BIGBIO_QA[0]["question"]  # the empty context adds nothing


def test_medmcqa_classlabel_cop_is_zero_based_even_without_a_zero(tmp_path: Path) -> None:
    pq = tmp_path / "validation.parquet"
    datasets.Dataset.from_list(_medmcqa([1, 2]), features=_medmcqa_features()).to_parquet(str(pq))
    assert [q.gold for q in _load(pq, preset="medmcqa")] == [("B",), ("C",)]


def test_medmcqa_test_split_with_hidden_labels_says_to_use_validation(tmp_path: Path) -> None:
    folder = tmp_path / "medmcqa"
    feats = _medmcqa_features()
    datasets.DatasetDict({"train": datasets.Dataset.from_list(_medmcqa([0, 3]), features=feats),
                          "test": datasets.Dataset.from_list(_medmcqa([-1, -1]), features=feats),
                          "validation": datasets.Dataset.from_list(_medmcqa([2, 0]), features=feats)}
                         ).save_to_disk(str(folder))
    with pytest.raises(UserError) as err:
        _load(folder, preset="medmcqa")  # dataset.split defaults to test
    assert "hidden label" in _one_line(err) and "dataset.split: validation" in str(err.value)
    assert [q.gold for q in _load(folder, preset="medmcqa", split="validation")] == [("C",), ("A",)]


def test_medmcqa_release_json_with_an_ambiguous_cop_is_refused_until_index_base_is_set(tmp_path: Path) -> None:
    rows = _medmcqa([1, 3, 2])  # 1-based in the release: the golds are A, C, B; read 0-based they would be B, D, C
    path = _jsonl(tmp_path / "dev.json", rows)
    with pytest.raises(UserError) as err:
        _load(path, preset="medmcqa")
    assert "index_base" in _one_line(err) and err.value.field == "dataset.fields.index_base"
    assert [q.gold for q in _load(path, preset="medmcqa", fields={"index_base": 1})] == [("A",), ("C",), ("B",)]
    assert [q.gold for q in _load(path, preset="medmcqa", fields={"index_base": 0})] == [("B",), ("D",), ("C",)]


def test_medmcqa_json_whose_answers_prove_their_base_needs_no_setting(tmp_path: Path) -> None:
    one_based = _jsonl(tmp_path / "release.json", _medmcqa([1, 4]))  # a 4 cannot be 0-based
    assert [q.gold for q in _load(one_based, preset="medmcqa")] == [("A",), ("D",)]
    zero_based = _jsonl(tmp_path / "hub.jsonl", _medmcqa([0, 2]))  # a 0 cannot be 1-based
    assert [q.gold for q in _load(zero_based, preset="medmcqa")] == [("A",), ("C",)]
    with pytest.raises(UserError, match="neither 0- nor 1-based"):
        _load(_jsonl(tmp_path / "mixed.jsonl", _medmcqa([0, 4])), preset="medmcqa")


def test_mmlu_preset_keeps_the_medical_subjects_unless_subsets_say(tmp_path: Path) -> None:
    value = datasets.Value("string")
    feats = datasets.Features({"question": value, "subject": value, "choices": datasets.Sequence(value),
                               "answer": datasets.ClassLabel(names=["A", "B", "C", "D"])})
    rows = [*MMLU, {"question": "Brightest star?", "subject": "astronomy",
                    "choices": ["Sirius", "Vega", "Sun", "Rigel"], "answer": 0},
            {"question": "Cell powerhouse?", "subject": "college_biology",
             "choices": ["Nucleus", "Mitochondrion", "Golgi", "Ribosome"], "answer": 1}]
    folder = tmp_path / "mmlu_all"
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows, features=feats)}).save_to_disk(str(folder))
    assert [q.dataset for q in _load(folder, preset="mmlu")] == ["anatomy", "college_biology", "medical_genetics"]
    assert [q.dataset for q in _load(folder, preset="mmlu", subsets=["astronomy"])] == ["astronomy"]
    only_astro = tmp_path / "astro.jsonl"
    _jsonl(only_astro, rows[2:3])
    with pytest.raises(UserError) as err:
        _load(only_astro, preset="mmlu")
    assert "medical subjects" in _one_line(err) and err.value.field == "dataset.subsets"


def test_options_that_are_not_text_are_refused_not_stringified(tmp_path: Path) -> None:
    rows = [{"question": "Q?", "options": [{"label": "A", "text": "x"}, {"label": "B", "text": "y"}],
             "answer_idx": "A"}]
    with pytest.raises(UserError) as err:
        _load(_jsonl(tmp_path / "odd.jsonl", rows), preset="medqa")
    assert "not text" in _one_line(err) and err.value.field == "dataset.fields.options"


def test_a_gold_that_is_not_among_the_options_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="'E' is not an option letter"):
        _load(_jsonl(tmp_path / "e.jsonl", [{**MEDQA[0], "answer_idx": "E"}]), preset="medqa")
    with pytest.raises(UserError, match="'Thyroiditis' is none of the option texts"):
        _load(_jsonl(tmp_path / "qa.jsonl", [{**BIGBIO_QA[0], "answer": ["Thyroiditis"]}]), preset="medqa")


def test_data_that_fits_no_layout_of_the_preset_names_each_layouts_columns(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        _load(_jsonl(tmp_path / "pqa.jsonl", PUBMEDQA), preset="medqa")
    msg = _one_line(err)
    assert "answer_idx" in msg and "choices" in msg and "bigbio/med_qa *_bigbio_qa" in msg
