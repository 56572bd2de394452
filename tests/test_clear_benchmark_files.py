"""CLEAR's multiple-choice benchmarks read from small files written in each publisher's own layout.

Each file below copies the publisher's columns, order and encoding (docs/integrations-hf.md names
the source of each); the golds are compared with letters worked out by hand from the rows.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.sources.datasets import load_dataset

pytest.importorskip("datasets", reason="the [hf] extra is not installed")


def _load(path: Path, preset: str, **kw: Any) -> list[Any]:
    return load_dataset("hf", str(path), kw.pop("subsets", None), None, 42, preset=preset, **kw)


def _csv(path: Path, header: list[str], rows: list[list[str]], *, trailing: int = 0,
         delimiter: str = ",") -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, delimiter=delimiter)
        if header:
            w.writerow(header)
        for r in rows:
            w.writerow([*r, *([""] * trailing)])
    return path


# -- MedQA: jind11/MedQA data_clean/questions/US/test.jsonl (as GBaker/MedQA-USMLE-4-options) ---------------


def test_medqa_publisher_jsonl(tmp_path: Path) -> None:
    rows = [{"question": "A 23-year-old ... Which is the best treatment?", "answer": "Nitrofurantoin",
             "options": {"A": "Ampicillin", "B": "Ceftriaxone", "C": "Doxycycline", "D": "Nitrofurantoin"},
             "meta_info": "step2&3", "answer_idx": "D"},
            {"question": "A 3-month-old ... Which is most likely?", "answer": "Placing the infant on its back",
             "options": {"A": "Placing the infant on its back", "B": "Side sleeping", "C": "Swaddling",
                         "D": "Soft bedding", "E": "Co-sleeping"}, "meta_info": "step1", "answer_idx": "A"}]
    f = tmp_path / "test.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    qs = _load(f, "medqa")
    assert [q.gold for q in qs] == [("D",), ("A",)]
    assert list(qs[1].options) == ["A", "B", "C", "D", "E"]  # the 5-option file keeps E
    assert "Nitrofurantoin" not in qs[0].text  # the `answer` text column is never read into the stem


# -- PubMedQA: pubmedqa/pubmedqa data/ori_pqal.json (and test_set.json), keyed by PMID ---------------------------


def _pqal(path: Path) -> Path:
    data = {"21645374": {"QUESTION": "Do mitochondria play a role?", "CONTEXTS": ["Background.", "Results."],
                         "LABELS": ["BACKGROUND", "RESULTS"], "MESHES": ["Apoptosis"], "YEAR": "2011",
                         "reasoning_required_pred": "yes", "reasoning_free_pred": "yes", "final_decision": "yes",
                         "LONG_ANSWER": "Mitochondria play a role."},
            "16418930": {"QUESTION": "Landolt C and snellen e acuity: differences?", "CONTEXTS": ["Methods."],
                         "LABELS": ["METHODS"], "MESHES": [], "YEAR": "2006", "reasoning_required_pred": "no",
                         "reasoning_free_pred": "no", "final_decision": "maybe", "LONG_ANSWER": "Small."}}
    path.write_text(json.dumps(data, indent=4), encoding="utf-8")
    return path


def test_pubmedqa_publisher_keyed_json(tmp_path: Path) -> None:
    qs = _load(_pqal(tmp_path / "test_set.json"), "pubmedqa")
    assert [(q.qid, q.gold) for q in qs] == [("21645374", ("A",)), ("16418930", ("C",))]  # yes=A, maybe=C
    assert qs[0].options == {"A": "yes", "B": "no", "C": "maybe"}
    assert qs[0].text.startswith("Background.\n\nResults.\n\nDo mitochondria")
    assert all("Mitochondria play a role." not in q.text and "Small." not in q.text for q in qs)  # LONG_ANSWER


# -- NEJM-QA: nejm-ai-qa/exams, one CSV per specialty, options inside `question` -------------------------------

NEJM_HEADER = ["question", "answer"]


def _nejm(folder: Path) -> Path:
    folder.mkdir()
    _csv(folder / "internal_medicine.csv", NEJM_HEADER, [
        ["A 60-year-old man has fatigue. Which test is next?\nA. Ferritin\nB. TSH\nC. Colonoscopy\nD. CT scan", "A"],
        ["Which of the following are causes of SIADH? Select all.\nA. Carbamazepine\nB. Lithium\nC. Small cell "
         "carcinoma\nD. Demeclocycline\nE. Pneumonia", "A,C,E"]])
    _csv(folder / "psychiatry.csv", NEJM_HEADER, [
        ["A patient reports:\n1. low mood\n2. anhedonia\nWhat is the diagnosis?\nA. MDD\nB. Bipolar I\nC. Dysthymia",
         "A"]])
    return folder


def test_nejm_qa_specialties_and_answer_sets(tmp_path: Path) -> None:
    qs = _load(_nejm(tmp_path / "exams"), "nejm-qa")
    assert [(q.dataset, q.gold) for q in qs] == [("internal_medicine", ("A",)), ("internal_medicine", ("A", "C", "E")),
                                                 ("psychiatry", ("A",))]
    assert all(q.multi_answer for q in qs)  # the benchmark's answers are sets: asked as select-all
    assert qs[1].options["E"] == "Pneumonia" and qs[1].text.endswith("Select all.")
    assert "1. low mood" in qs[2].text and "A. MDD" not in qs[2].text


def test_nejm_qa_one_specialty_file(tmp_path: Path) -> None:
    qs = _load(_nejm(tmp_path / "exams") / "internal_medicine.csv", "nejm-qa")
    assert {q.dataset for q in qs} == {"internal_medicine"} and len(qs) == 2


def test_nejm_qa_misnumbered_option_is_one_line(tmp_path: Path) -> None:
    f = _csv(tmp_path / "obgyn.csv", NEJM_HEADER, [["Which?\nA. x\nThird. y\nC. z", "A"]])
    with pytest.raises(UserError) as e:
        _load(f, "nejm-qa")
    assert "option lines" in str(e.value) and "row 0" in str(e.value)


# -- MedBullets: HanjieChen/ChallengeClinicalQA medbullets/medbullets_op5.csv (rows end in empty fields) -------

MB_HEADER = ["link", "question", "opa", "opb", "opc", "opd", "ope", "answer_idx", "answer", "explanation"]


def test_medbullets_op5_csv_with_trailing_fields(tmp_path: Path) -> None:
    f = _csv(tmp_path / "medbullets_op5.csv", MB_HEADER, [
        ["https://bit.ly/x", "A 64-year-old man ... prophylaxis?", "Acetazolamide", "Amitriptyline", "Clopidogrel",
         "Epinephrine", "Verapamil", "A", "Acetazolamide", "Acute angle-closure glaucoma ..."],
        ["https://bit.ly/y", "A 42-year-old woman ... fastest to slowest?", "Atria", "AV node", "Purkinje",
         "Purkinje fibers > atria > ventricles > AV node", "Ventricles", "D",
         "Purkinje fibers > atria > ventricles > AV node", "The conduction velocity ..."]], trailing=5)
    qs = _load(f, "medbullets")
    assert [q.gold for q in qs] == [("A",), ("D",)]
    assert qs[0].options["E"] == "Verapamil" and len(qs[1].options) == 5
    assert all("glaucoma" not in q.text and "conduction velocity" not in q.text for q in qs)


def test_medbullets_op4_csv(tmp_path: Path) -> None:
    header = [c for c in MB_HEADER if c != "ope"]
    f = _csv(tmp_path / "medbullets_op4.csv", header, [["l", "Q?", "a", "b", "c", "d", "C", "c", "exp"]])
    assert [(q.gold, len(q.options)) for q in _load(f, "medbullets")] == [(("C",), 4)]


def test_csv_extra_field_with_text_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "medbullets_op5.csv"
    f.write_text(",".join(MB_HEADER) + "\nl,Q?,a,b,c,d,e,A,a,exp,SHIFTED\n", encoding="utf-8")
    with pytest.raises(UserError) as e:
        _load(f, "medbullets")
    assert "row 1 has 11 fields" in str(e.value)


# -- MedExQA: knowlab/MedExQA test/<subject>_test.tsv, no header ----------------------------------------------


def test_medexqa_headerless_tsv_folder(tmp_path: Path) -> None:
    (tmp_path / "test").mkdir()
    _csv(tmp_path / "test" / "speech_pathologist_test.tsv", [], [
        ["Which nerve innervates the larynx?", "Facial", "Vagus", "Trigeminal", "Hypoglossal", "exp one", "exp two",
         "B"]], delimiter="\t")
    _csv(tmp_path / "test" / "biomedical_engineer_test.tsv", [], [
        ["Unit of magnetic flux density?", "Weber", "Henry", "Tesla", "Farad", "e1", "e2", "C"],
        ["Which sensor measures SpO2?", "Pulse oximeter", "ECG", "EEG", "EMG", "e1", "e2", "A"]], delimiter="\t")
    qs = _load(tmp_path / "test", "medexqa")
    assert [(q.dataset, q.gold) for q in qs] == [("biomedical_engineer", ("C",)), ("biomedical_engineer", ("A",)),
                                                 ("speech_pathologist", ("B",))]
    assert qs[0].options == {"A": "Weber", "B": "Henry", "C": "Tesla", "D": "Farad"}
    assert all("exp" not in q.text and "e1" not in q.text for q in qs)


# -- AfriMed-QA: intronhealth/afrimedqa_v2 CSV -----------------------------------------------------------------

AFRI_HEADER = ["sample_id", "split", "gender", "discipline", "clinical_experience", "country", "question_type",
               "prompt", "question", "question_clean", "answer_options", "correct_answer", "answer_rationale",
               "specialty", "region_specific", "mentions_Africa", "mentions_age", "mentions_gender", "tier",
               "neg_percent", "quality", "rated_african", "rated_correct", "rated_omission", "rated_hallucination",
               "rated_reasonable", "rated_harmful", "rated_bias", "version", "requires_african_expertise"]


def _afri(sid: str, qtype: str, question: str, options: dict[str, str] | str, correct: str) -> list[str]:
    opts = options if isinstance(options, str) else json.dumps(options)
    row = dict.fromkeys(AFRI_HEADER, "")
    row.update(sample_id=sid, split="test", question_type=qtype, question=question, question_clean=question,
               answer_options=opts, correct_answer=correct, answer_rationale="Because.", version="v2")
    return [row[c] for c in AFRI_HEADER]


def test_afrimedqa_csv(tmp_path: Path) -> None:
    five = {f"option{i}": t for i, t in enumerate(["Typhoid fever", "Dengue", "Influenza", "Malaria", "Leptospirosis"],
                                                   1)}
    f = _csv(tmp_path / "afrimedqa_v2.csv", AFRI_HEADER, [
        _afri("s1", "mcq", "Fever and rigors a week after a trip to a malarious area ... diagnosis?", five, "option4"),
        _afri("s2", "saq", "Describe the management of malaria.", "", ""),
        _afri("s3", "mcq", "Which are ACE inhibitors?", {"option1": "Lisinopril", "option2": "Losartan", "option3":
                                                         "Enalapril", "option4": "Ramipril", "option5": "Captopril"},
              "option1,option3,option4,option5"),
        _afri("s4", "mcq", "Deep dog bite: additional treatment?", {"option1": "analgesia", "option2": "rabies "
              "vaccine", "option3": "Calcium", "option4": "Vitamin C", "option5": ""}, "option2")])
    qs = _load(f, "afrimedqa")
    assert [(q.qid, q.gold) for q in qs] == [("s1", ("D",)), ("s3", ("A", "C", "D", "E")), ("s4", ("B",))]
    assert list(qs[2].options) == ["A", "B", "C", "D"]  # the empty fifth slot is no option
    assert all("Because." not in q.text for q in qs)


# -- MMLU-Pro: TIGER-Lab/MMLU-Pro (parquet on the hub; here its rows as JSONL) -----------------------------------


def test_mmlu_pro_ten_options_health_by_default(tmp_path: Path) -> None:
    ten = [f"opt{i}" for i in range(10)]
    rows = [{"question_id": 7001, "question": "Which vitamin ...?", "options": ten, "answer": "I", "answer_index": 8,
             "cot_content": "", "category": "health", "src": "ori_mmlu-clinical_knowledge"},
            {"question_id": 7002, "question": "Supply and demand?", "options": ten[:4], "answer": "B",
             "answer_index": 1, "cot_content": "A: Let's think ...", "category": "economics", "src": "stemez"},
            {"question_id": 7003, "question": "Which nerve ...?", "options": ten, "answer": "J", "answer_index": 9,
             "cot_content": "", "category": "health", "src": "ori_mmlu-anatomy"}]
    f = tmp_path / "mmlu_pro.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    qs = _load(f, "mmlu-pro")
    assert [(q.dataset, q.qid, q.gold) for q in qs] == [("health", "7001", ("I",)), ("health", "7003", ("J",))]
    assert list(qs[0].options) == list("ABCDEFGHIJ")
    assert [q.qid for q in _load(f, "mmlu-pro", subsets=["economics"])] == ["7002"]


# -- a missing file says where the benchmark is published ---------------------------------------------------


@pytest.mark.parametrize("preset,where", [("nejm-qa", "nejm-ai-qa/exams"), ("medbullets", "ChallengeClinicalQA"),
                                          ("medexqa", "knowlab/MedExQA"), ("afrimedqa", "afrimedqa_v2"),
                                          ("mmlu-pro", "TIGER-Lab/MMLU-Pro"), ("pubmedqa", "pubmedqa/pubmedqa"),
                                          ("medqa", "jind11/MedQA")])
def test_missing_file_names_the_publisher(tmp_path: Path, preset: str, where: str) -> None:
    with pytest.raises(UserError) as e:
        _load(tmp_path / "nowhere" / "data.csv", preset)
    msg = str(e.value)
    assert where in msg and "Nothing is downloaded" in msg and "\n" not in msg


def test_mmlu_original_headerless_csvs(tmp_path: Path) -> None:
    (tmp_path / "test").mkdir()
    _csv(tmp_path / "test" / "medical_genetics_test.csv", [], [
        ["In DNA adenine normally pairs with:", "cytosine.", "guanine.", "thymine.", "uracil.", "C"],
        ["Which of the following is an example of monosomy?", "46,XX", "47,XXX", "69,XYY", "45,X", "D"]])
    _csv(tmp_path / "test" / "marketing_test.csv", [], [["Q?", "a", "b", "c", "d", "A"]])
    qs = _load(tmp_path / "test", "mmlu")
    assert [(q.dataset, q.gold) for q in qs] == [("medical_genetics", ("C",)), ("medical_genetics", ("D",))]
    assert qs[1].options["A"] == "46,XX"  # a quoted comma stays inside its option


def test_afrimedqa_bad_row_is_named_by_its_place_in_the_file(tmp_path: Path) -> None:
    five = {f"option{i}": f"text {i}" for i in range(1, 6)}
    f = _csv(tmp_path / "afri.csv", AFRI_HEADER, [_afri("s0", "saq", "Describe.", "", ""),
                                                  _afri("s1", "mcq", "Which?", five, "option9")])
    with pytest.raises(UserError) as e:
        _load(f, "afrimedqa")
    assert "(row 1, id 's1')" in str(e.value) and "'option9' is not one of the options' keys" in str(e.value)
