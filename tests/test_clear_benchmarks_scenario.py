"""scenarios/clear_benchmarks.yaml end to end on the scripted model: a few items of every
benchmark, each in its publisher's layout (tmp files named through the scenario's variables), the
free-text ones (HealthBench Hard, MedRBench) graded beside the multiple-choice ones in the same run,
and every one of CLEAR's paper tables in the report, in the paper's shape."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .test_clear_benchmark_files import AFRI_HEADER, MB_HEADER, NEJM_HEADER, _afri, _csv, _pqal

pytest.importorskip("datasets", reason="the [hf] extra is not installed")

ROOT = Path(__file__).resolve().parents[1]
SPECIALTIES = ("internal_medicine", "general_surgery", "pediatrics", "obgyn", "psychiatry")
FREETEXT = Path(__file__).parent / "fixtures" / "freetext"


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _files(tmp: Path) -> dict[str, Path]:
    opts = {"A": "Ampicillin", "B": "Ceftriaxone", "C": "Doxycycline", "D": "Nitrofurantoin"}
    nejm = tmp / "nejm"
    nejm.mkdir()
    for s in SPECIALTIES:
        _csv(nejm / f"{s}.csv", NEJM_HEADER, [[f"{s} case 1?\nA. one\nB. two\nC. three\nD. four", "B"],
                                              [f"{s} case 2, select all?\nA. one\nB. two\nC. three", "A,C"]])
    (tmp / "medexqa").mkdir()
    _csv(tmp / "medexqa" / "speech_pathologist_test.tsv", [], [["Q?", "a", "b", "c", "d", "e0", "e1", "C"]],
         delimiter="\t")
    medr = tmp / "medrbench"
    medr.mkdir()
    for name in ("diagnosis_957_cases_with_rare_disease_491.json", "treatment_496_cases_with_rare_disease_165.json"):
        shutil.copy(FREETEXT / name, medr / name)
    hb = shutil.copy(FREETEXT / "hard_2025-05-08-21-00-10.jsonl", tmp / "hard_2025-05-08-21-00-10.jsonl")
    ten = [f"choice {i}" for i in range(10)]
    five = {f"option{i}": f"text {i}" for i in range(1, 6)}
    return {
        "CLEAR_HEALTHBENCH": Path(hb),
        "CLEAR_MEDRBENCH": medr,
        "CLEAR_MEDQA": _jsonl(tmp / "medqa.jsonl", [{"question": "UTI in pregnancy?", "answer": "Nitrofurantoin",
                                                     "options": opts, "meta_info": "step2&3", "answer_idx": "D"}]),
        "CLEAR_PUBMEDQA": _pqal(tmp / "test_set.json"),
        "CLEAR_NEJMQA": nejm,
        "CLEAR_MEDBULLETS": _csv(tmp / "medbullets_op5.csv", MB_HEADER,
                                 [["l", "Prophylaxis?", "a", "b", "c", "d", "e", "A", "a", "exp"]], trailing=5),
        "CLEAR_MEDEXQA": tmp / "medexqa",
        "CLEAR_AFRIMEDQA": _csv(tmp / "afri.csv", AFRI_HEADER, [_afri("s1", "mcq", "Which?", five, "option4")]),
        "CLEAR_MMLU": _jsonl(tmp / "mmlu.jsonl", [{"question": "Arm bone?", "subject": "anatomy",
                                                   "choices": ["Femur", "Humerus", "Tibia", "Fibula"], "answer": 0}]),
        "CLEAR_MMLU_PRO": _jsonl(tmp / "mmlu_pro.jsonl", [{"question_id": 1, "question": "Pellagra?", "options": ten,
                                                           "answer": "J", "answer_index": 9, "cot_content": "",
                                                           "category": "health", "src": "x"}]),
    }


def test_the_suite_runs_and_reports_every_paper_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import subprocess
    import sys

    import medpanel
    from medpanel.experiments.analysis.report import build_tables
    from medpanel.experiments.run.scenario.scenario import load_scenario

    files = _files(tmp_path)
    for var, path in files.items():
        monkeypatch.setenv(var, str(path))
    monkeypatch.setenv("MEDPANEL_CORPUS", "quickstart")
    monkeypatch.setenv("MEDPANEL_WEB", "quickstart-web")
    monkeypatch.chdir(ROOT / "scenarios")
    scenario = load_scenario(ROOT / "scenarios" / "clear_benchmarks.yaml",
                             ["model.backend=scripted", "dataset.limit=2"])
    result = medpanel.run(scenario, run_dir=tmp_path / "run", workers=2)
    assert result.complete, (result.state, result.reason)
    run = result.load()
    rows = run.rows
    datasets = {r.dataset for r in rows}
    free = {"healthbench", "medrbench-diagnosis", "medrbench-treatment"}
    assert datasets == {"medqa", "pubmedqa", "medbullets", "afrimedqa", "mmlu.anatomy", "mmlu-pro.health",
                        "medexqa.speech_pathologist", *(f"nejm-qa.{s}" for s in SPECIALTIES), *free}
    mcq = 2 + 1 + 1 + 1 + 1 + 1 + 1 + 2 * 5
    assert len(rows) == 4 * (mcq + 2 + 2 + 2) and not any(r.error for r in rows)
    multi = [r for r in rows if r.dataset.startswith("nejm-qa.") and r.gold == "A,C"]
    assert len(multi) == 4 * 5  # the several-answer items keep their whole set
    # Each free-text part is graded against its own files: every row has a valid grade of its kind.
    texts = [r for r in rows if r.dataset in free]
    assert all(r.summary["grade_valid"] is True for r in texts)
    assert {r.summary["grade_kind"] for r in texts if r.dataset == "healthbench"} == {"rubric"}
    assert {r.summary["grade_kind"] for r in texts if r.dataset != "healthbench"} == {"medrbench"}
    assert sorted(run.record.scenario["settings"]["rubric_file"]) == sorted(
        [str(files["CLEAR_HEALTHBENCH"]), str(files["CLEAR_MEDRBENCH"])])

    tables = {t.title.split(":")[0]: t for t in build_tables(rows, run.record, n_boot=50)}
    for n in (1, 2, 4, 5, 8, 9):
        assert f"CLEAR Table {n}" in tables, sorted(tables)
    methods = ["Direct (parametric only)", "MedRAG (BM25)", "Online search only", "CLEAR"]
    t1 = tables["CLEAR Table 1"]
    assert t1.columns[:3] == ["method", "medqa", "pubmedqa"] and [r[0] for r in t1.rows] == methods
    t2 = tables["CLEAR Table 2"]
    assert t2.columns == ["method", *SPECIALTIES, "overall", "overall_any_of", "n"]
    assert [r[-1] for r in t2.rows] == [10] * 4
    assert tables["CLEAR Table 8"].columns[1:7] == ["medbullets", "medexqa", "afrimedqa", "afrimedqa_any_of", "mmlu",
                                                   "mmlu-pro"]
    assert [r[0] for r in tables["CLEAR Table 4"].rows] == methods
    assert [r[-1] for r in tables["CLEAR Table 4"].rows] == [mcq] * 4  # the free-text rows are not MCQ accuracy
    t3 = next(t for title, t in tables.items() if title.startswith("Table 3"))
    lines = [dict(zip(t3.columns, r, strict=True)) for r in t3.rows]
    assert [x["method"] for x in lines] == ["direct", "rag-bm25", "online", "clear-default"]
    assert all((x["n_diagnosis"], x["n_treatment"], x["n_healthbench"], x["n_missing"]) == (2, 2, 2, 0)
               for x in lines)
    assert "published treatment-planning analysis" in (t3.note or "")  # no live web: the fallback, said
    t9 = tables["CLEAR Table 9"]
    assert "No live web backend is configured" in t9.note
    assert {r[0]: r[1] for r in t9.rows}["CLEAR"] == "snapshot"
    assert {r[0]: r[1] for r in t9.rows}["Direct (parametric only)"] == "none (no web search)"

    # `medpanel report` prints Table 3 beside the paper's other tables, from this one run.
    rep = subprocess.run([sys.executable, "-m", "medpanel", "report", str(tmp_path / "run")], capture_output=True,
                         text=True, timeout=600, cwd=tmp_path, env={**os.environ, "COLUMNS": "250"})
    assert rep.returncode == 0, rep.stdout[-3000:] + rep.stderr[-3000:]
    for title in ("CLEAR Table 1", "CLEAR Table 2", "Table 3 free-text benchmarks", "CLEAR Table 4",
                  "CLEAR Table 5", "CLEAR Table 8", "CLEAR Table 9", "HealthBench by theme and axis"):
        assert title in rep.stdout, title
