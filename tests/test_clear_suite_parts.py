"""Free-text benchmarks as `dataset.parts` beside multiple-choice ones: their questions keep the
names their files give them, each part is graded against its own files (the grader's
`rubric_file`, set from the parts), and a scenario that would grade them otherwise is one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.sources.dataset_parts import DatasetPart, grading_files, load_parts

FREETEXT = Path(__file__).parent / "fixtures" / "freetext"
MEDR_FILES = ("diagnosis_957_cases_with_rare_disease_491.json", "treatment_496_cases_with_rare_disease_165.json")
HB_FILE = "hard_2025-05-08-21-00-10.jsonl"


def _suite(tmp: Path) -> Path:
    """A scenario folder with the free-text files in their published layouts, and a small JSONL MCQ file."""
    data = tmp / "data"
    (data / "medrbench").mkdir(parents=True)
    for name in MEDR_FILES:
        shutil.copy(FREETEXT / name, data / "medrbench" / name)
    shutil.copy(FREETEXT / HB_FILE, data / HB_FILE)
    (data / "mcq.jsonl").write_text('{"realidx": "1", "question": "Q?", "options": {"A": "a", "B": "b"}, '
                                    '"answer_idx": "B"}\n', encoding="utf-8")
    return data


def _parts() -> list[DatasetPart]:
    return [DatasetPart(name="mcq", source="jsonl", path="data/mcq.jsonl"),
            DatasetPart(name="healthbench", source="freetext", path=f"data/{HB_FILE}"),
            DatasetPart(name="medrbench", source="freetext", path="data/medrbench")]


def _scenario(pipeline: str = "clear", settings: dict[str, object] | None = None) -> Scenario:
    return Scenario.model_validate({
        "name": "suite", "pipeline": pipeline, "variants": ["direct"] if pipeline == "clear" else [],
        "settings": settings or {}, "model": {"backend": "scripted"},
        "dataset": {"parts": [p.model_dump(exclude_defaults=True) for p in _parts()]}})


def test_free_text_parts_load_beside_mcq_under_their_own_dataset_names(tmp_path: Path) -> None:
    _suite(tmp_path)
    qs = load_parts(_parts(), None, 42, base_dir=tmp_path)
    # by hand: one MCQ item (its part's name), 3 HealthBench conversations, 3 + 2 MedRBench cases
    assert [(q.dataset, q.qid) for q in qs] == [
        ("mcq", "1"), ("healthbench", "hb-fixture-0001"), ("healthbench", "hb-fixture-0002"),
        ("healthbench", "hb-fixture-0003"),
        ("medrbench-diagnosis", "PMC90000001"), ("medrbench-diagnosis", "PMC90000002"),
        ("medrbench-diagnosis", "PMC90000003"), ("medrbench-treatment", "PMC90000101"),
        ("medrbench-treatment", "PMC90000102")]
    assert all(not q.options and not q.gold for q in qs[1:])  # the rubric and reference stay in the files
    assert qs[0].gold == ("B",)
    assert len(load_parts(_parts(), 1, 42, base_dir=tmp_path)) == 1 + 1 + 1 + 1  # --limit caps per dataset
    assert grading_files(_parts(), tmp_path) == [str(tmp_path / "data" / HB_FILE), str(tmp_path / "data/medrbench")]
    # a scenario named by a relative path: the keys run.json records are absolute all the same
    assert grading_files(_parts(), Path("scenarios"))[0] == str(Path.cwd() / "scenarios" / "data" / HB_FILE)


def test_one_benchmark_named_by_two_parts_is_one_line(tmp_path: Path) -> None:
    _suite(tmp_path)
    twice = [*_parts(), DatasetPart(name="medrbench-again", source="freetext", path="data/medrbench")]
    with pytest.raises(UserError) as exc:
        load_parts(twice, None, 42, base_dir=tmp_path)
    assert "in parts medrbench and medrbench-again" in str(exc.value) and "\n" not in str(exc.value)
    assert exc.value.field == "dataset.parts[medrbench-again]"


def test_the_plan_grades_each_free_text_part_with_its_own_files(tmp_path: Path) -> None:
    _suite(tmp_path)
    plan = make_plan(_scenario(), base_dir=tmp_path)
    files = [str(tmp_path / "data" / HB_FILE), str(tmp_path / "data/medrbench")]
    assert plan.scenario.settings["rubric_file"] == files
    assert {c.settings["rubric_file"] == files for c in plan.conditions} == {True}
    # a plan made again from its own record keeps it (resume)
    again = make_plan(plan.scenario, base_dir=tmp_path)
    assert again.scenario.settings["rubric_file"] == files
    # an MCQ-only suite is untouched
    mcq = _scenario().model_copy(update={"dataset": _scenario().dataset.model_copy(update={"parts": _parts()[:1]})})
    assert "rubric_file" not in make_plan(mcq, base_dir=tmp_path).scenario.settings


def test_a_rubric_file_of_ones_own_or_a_pipeline_without_grader_is_one_line(tmp_path: Path) -> None:
    _suite(tmp_path)
    with pytest.raises(UserError) as exc:
        make_plan(_scenario(settings={"rubric_file": "sample"}), base_dir=tmp_path, file="s.yaml")
    assert exc.value.field == "settings.rubric_file" and "remove settings.rubric_file" in str(exc.value)
    with pytest.raises(UserError) as exc:
        make_plan(_scenario(pipeline="generalist"), base_dir=tmp_path, file="s.yaml")
    assert exc.value.field == "dataset.parts" and "graded by the clear pipeline" in str(exc.value)
