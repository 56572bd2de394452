"""Dataset loaders: the shared MedAgentsBench hard subset, the built-in sample set, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.sources.datasets import load_dataset, load_medagentsbench_file

SHARED = Path(__file__).parents[2] / "shared" / "data" / "medagentsbench"
EXPECTED = {
    "medbullets": 89,
    "medexqa": 100,
    "medmcqa": 100,
    "medqa": 100,
    "medxpertqa-r": 100,
    "medxpertqa-u": 100,
    "mmlu": 73,
    "mmlu-pro": 100,
    "pubmedqa": 100,
}
needs_shared = pytest.mark.skipif(
    not SHARED.is_dir(), reason=f"shared MedAgentsBench copy not found at {SHARED}"
)


def _first_raw(subset: str) -> dict:
    with (SHARED / subset / "test_hard.jsonl").open(encoding="utf-8") as fh:
        return json.loads(fh.readline())


def _write(path: Path, records: list[dict | str]) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _record(idx: str = "1", **over: object) -> dict:
    rec: dict = {
        "realidx": idx,
        "question": "Which?",
        "options": {"A": "a", "B": "b", "C": "c"},
        "answer_idx": "B",
    }
    rec.update(over)
    return rec


# -- the shared benchmark ------------------------------------------------------------------------


@needs_shared
def test_all_subsets_load_with_readme_counts() -> None:
    questions = load_dataset("medagentsbench", SHARED, None, None, seed=0)
    counts: dict[str, int] = {}
    for q in questions:
        counts[q.dataset] = counts.get(q.dataset, 0) + 1
    assert counts == EXPECTED
    # Subset order is sorted, and each subset is one contiguous block.
    blocks = [q.dataset for i, q in enumerate(questions) if i == 0 or questions[i - 1].dataset != q.dataset]
    assert blocks == sorted(EXPECTED)


@needs_shared
@pytest.mark.parametrize("subset", sorted(EXPECTED))
def test_subset_items_are_well_formed(subset: str) -> None:
    questions = load_medagentsbench_file(SHARED / subset / "test_hard.jsonl", subset)
    assert len(questions) == EXPECTED[subset]
    assert all(isinstance(q.qid, str) and q.qid for q in questions)
    assert len({q.qid for q in questions}) == len(questions)
    for q in questions:
        assert q.dataset == subset
        assert 3 <= len(q.options) <= 10
        assert list(q.options) == sorted(q.options)
        assert q.gold and set(q.gold) <= set(q.options)
        assert not q.multi_answer
        assert q.text == q.text.strip()
    # File order is kept: the first question is the first raw record.
    assert questions[0].qid == str(_first_raw(subset)["realidx"])


@needs_shared
def test_int_realidx_is_normalised_to_str() -> None:
    raw = _first_raw("medqa")
    assert isinstance(raw["realidx"], int)
    q = load_medagentsbench_file(SHARED / "medqa" / "test_hard.jsonl", "medqa")[0]
    assert q.qid == str(raw["realidx"])
    assert q.gold == (raw["answer_idx"],)


@needs_shared
@pytest.mark.parametrize(("subset", "field"), [("pubmedqa", "answer_rationale"), ("medbullets", "reason")])
def test_gold_revealing_fields_never_leave_the_loader(subset: str, field: str) -> None:
    secret = _first_raw(subset)[field]
    assert len(secret) > 40  # a real rationale, so the check below means something
    probe = secret[:60]
    for q in load_medagentsbench_file(SHARED / subset / "test_hard.jsonl", subset):
        dumped = q.model_dump()
        assert probe not in q.model_dump_json()
        assert probe not in q.text and all(probe not in t for t in dumped["options"].values())


@needs_shared
def test_medmcqa_keeps_internal_line_breaks() -> None:
    raw = _first_raw("medmcqa")
    q = load_medagentsbench_file(SHARED / "medmcqa" / "test_hard.jsonl", "medmcqa")[0]
    assert "\n" in raw["question"]
    assert q.text == raw["question"].strip()


@needs_shared
def test_limit_sampling_is_deterministic_per_subset_and_seed() -> None:
    subsets = ["medqa", "mmlu"]
    a = load_dataset("medagentsbench", SHARED, subsets, 5, seed=1)
    b = load_dataset("medagentsbench", SHARED, subsets, 5, seed=1)
    c = load_dataset("medagentsbench", SHARED, subsets, 5, seed=2)
    assert [q.key for q in a] == [q.key for q in b]
    assert [q.key for q in a] != [q.key for q in c]
    assert [q.dataset for q in a] == ["medqa"] * 5 + ["mmlu"] * 5
    # Kept in file order, not draw order.
    full = load_medagentsbench_file(SHARED / "medqa" / "test_hard.jsonl", "medqa")
    position = {q.qid: i for i, q in enumerate(full)}
    picked = [position[q.qid] for q in a if q.dataset == "medqa"]
    assert picked == sorted(picked)
    # Another subset's presence does not change this subset's sample.
    alone = load_dataset("medagentsbench", SHARED, ["medqa"], 5, seed=1)
    assert [q.key for q in alone] == [q.key for q in a[:5]]


@needs_shared
def test_relative_path_resolves_against_base_dir() -> None:
    questions = load_dataset("medagentsbench", "medagentsbench", ["mmlu"], 2, seed=0, base_dir=SHARED.parent)
    assert [q.dataset for q in questions] == ["mmlu", "mmlu"]


@needs_shared
def test_missing_subset_lists_available_subsets() -> None:
    with pytest.raises(UserError) as err:
        load_dataset("medagentsbench", SHARED, ["medqa", "nejm"], None, seed=0)
    msg = str(err.value)
    assert "nejm" in msg and str(SHARED) in msg
    assert all(name in msg for name in EXPECTED)
    assert "\n" not in msg


@needs_shared
def test_repo_clone_layout(tmp_path: Path) -> None:
    clone = tmp_path / "medagents-benchmark"
    (clone / "data" / "mmlu").mkdir(parents=True)
    (clone / "README.md").write_text("clone\n")
    shutil.copy(SHARED / "mmlu" / "test_hard.jsonl", clone / "data" / "mmlu" / "test_hard.jsonl")
    questions = load_dataset("medagentsbench", clone, None, None, seed=0)
    assert len(questions) == EXPECTED["mmlu"]
    assert {q.dataset for q in questions} == {"mmlu"}


# -- layouts and sources without the shared copy -------------------------------------------------


def test_missing_directory_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(UserError, match="nowhere"):
        load_dataset("medagentsbench", missing, None, None, seed=0)


def test_missing_subset_in_tmp_layout_lists_available(tmp_path: Path) -> None:
    for name in ("beta", "alpha"):
        (tmp_path / name).mkdir()
        _write(tmp_path / name / "test_hard.jsonl", [_record()])
    (tmp_path / "empty").mkdir()  # no test_hard.jsonl: not a subset
    assert [q.dataset for q in load_dataset("medagentsbench", tmp_path, None, None, 0)] == ["alpha", "beta"]
    with pytest.raises(UserError, match=r"Available subsets: alpha, beta$"):
        load_dataset("medagentsbench", tmp_path, ["gamma"], None, seed=0)


def test_unknown_source_lists_valid_sources() -> None:
    with pytest.raises(UserError, match="medagentsbench, jsonl, sample"):
        load_dataset("huggingface", None, None, None, seed=0)


def test_non_positive_limit_is_a_user_error() -> None:
    with pytest.raises(UserError, match="limit"):
        load_dataset("sample", None, None, 0, seed=0)


def test_sample_set_has_both_subsets_and_one_multi_answer() -> None:
    questions = load_dataset("sample", None, None, None, seed=0)
    by_subset: dict[str, int] = {}
    for q in questions:
        by_subset[q.dataset] = by_subset.get(q.dataset, 0) + 1
    assert list(by_subset) == ["medqa-style", "pubmedqa-style"]
    assert by_subset["medqa-style"] == 8
    assert 3 <= by_subset["pubmedqa-style"] <= 4
    multi = [q for q in questions if q.multi_answer]
    assert len(multi) == 1 and multi[0].gold == ("A", "C") and multi[0].dataset == "medqa-style"
    assert any(len(q.options) >= 6 for q in questions)
    assert {len(q.options) for q in questions if q.dataset == "medqa-style"} >= {4, 5}
    for q in questions:
        assert set(q.gold) <= set(q.options)
        if q.dataset == "pubmedqa-style":
            assert q.options == {"A": "yes", "B": "no", "C": "maybe"}
    # path None means the sample set whatever the source says.
    assert load_dataset("medagentsbench", None, None, None, seed=0) == questions


def test_sample_subset_filter_and_limit() -> None:
    a = load_dataset("sample", None, ["pubmedqa-style"], 2, seed=3)
    assert len(a) == 2 and {q.dataset for q in a} == {"pubmedqa-style"}
    assert a == load_dataset("sample", None, ["pubmedqa-style"], 2, seed=3)
    with pytest.raises(UserError, match="medqa-style, pubmedqa-style"):
        load_dataset("sample", None, ["nope"], None, seed=0)


def test_jsonl_source_uses_dataset_field_or_file_stem(tmp_path: Path) -> None:
    file = _write(
        tmp_path / "mine.jsonl",
        [_record("1"), _record("2", dataset="other"), _record(3, answer_rationale="B because")],
    )
    questions = load_dataset("jsonl", "mine.jsonl", None, None, seed=0, base_dir=tmp_path)
    assert [(q.dataset, q.qid) for q in questions] == [("mine", "1"), ("mine", "3"), ("other", "2")]
    assert "B because" not in questions[1].model_dump_json()
    # The benchmark loader names the dataset itself and ignores a `dataset` field.
    assert {q.dataset for q in load_medagentsbench_file(file, "x")} == {"x"}


def test_options_sorted_and_multi_answer_parsed(tmp_path: Path) -> None:
    rec = _record(options={"C": "c", "A": " a ", "B": "b"}, answer_idx="C, A", question="  stem\nline 2  \n")
    (q,) = load_medagentsbench_file(_write(tmp_path / "f.jsonl", [rec, ""]), "t")
    assert list(q.options) == ["A", "B", "C"] and q.options["A"] == "a"
    # Two gold letters alone do not make a multi-answer item: only a declared type does.
    assert q.gold == ("A", "C") and not q.multi_answer
    assert q.text == "stem\nline 2"
    (declared,) = load_medagentsbench_file(_write(tmp_path / "g.jsonl", [{**rec, "multi_answer": True}]), "t")
    assert declared.gold == ("A", "C") and declared.multi_answer


# -- malformed lines -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "expect"),
    [
        ('{"realidx": "2", "question": ', "not valid JSON"),
        ('["a list"]', "JSON object"),
        (json.dumps({k: v for k, v in _record("2").items() if k != "answer_idx"}), "answer_idx"),
        (json.dumps(_record("2", answer_idx="E")), "'E' is not among the options A, B, C"),
        (json.dumps(_record("2", options={"A": "only"}, answer_idx="A")), "at least two"),
        (json.dumps(_record("2", options={"a": "x", "b": "y"}, answer_idx="a")), "capital letters"),
        (json.dumps(_record("2", question="   ")), "question"),
        (json.dumps(_record("1")), "duplicate id '1'"),
    ],
)
def test_malformed_line_names_file_line_and_problem(tmp_path: Path, bad: str, expect: str) -> None:
    file = _write(tmp_path / "bad.jsonl", [_record("1"), "", bad])
    with pytest.raises(UserError) as err:
        load_medagentsbench_file(file, "t")
    msg = str(err.value)
    assert f"{file}:3" in msg
    assert expect in msg
    assert "\n" not in msg
