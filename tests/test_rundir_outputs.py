"""A path a user names for an output (`--out`) is compared by identity with the run's own files,
written without writing through it, and only into a folder that exists."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.rundir_helpers import copy_run, fingerprint, finished_run, run_cli
from tests.transcript_files import transcript_files


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return finished_run(tmp_path_factory.mktemp("outputs-base"))


@pytest.fixture
def run(base: Path, tmp_path: Path) -> Path:
    return copy_run(base, tmp_path / "run")


def _first_transcript(run: Path) -> str:
    return str(transcript_files(run)[0].relative_to(run))


RECORDS: list[tuple[str, Callable[[Path], str]]] = [
    ("run-json", lambda run: "run.json"),
    ("study", lambda run: "study.db"),
    ("questions", lambda run: "questions.jsonl"),
    ("status", lambda run: "status.json"),
    ("transcript", _first_transcript),
]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize(("record_id", "record"), RECORDS, ids=[r[0] for r in RECORDS])
def test_export_onto_a_hard_link_of_a_run_record_is_refused(run: Path, tmp_path: Path, fmt: str, record_id: str,
                                                             record: Callable[[Path], str]) -> None:
    own = run / record(run)
    out = tmp_path / f"out.{fmt}"
    os.link(own, out)
    before = fingerprint(own)
    outcome = run_cli(["export", str(run), "--format", fmt, "--out", str(out)])
    outcome.refused("hard link")
    assert record(run) in outcome.res.err
    assert fingerprint(own) == before, f"export wrote into {own}"


def _written_names(run: Path, argv_tail: list[str], folder: Path) -> list[str]:
    """The files a command writes into an output folder (learnt from a first, clean call)."""
    outcome = run_cli([*argv_tail[:1], str(run), *argv_tail[1:], "--out", str(folder)])
    assert outcome.res.rc == 0, outcome.res.err + outcome.res.tb
    return sorted(p.name for p in folder.iterdir())


def test_compare_into_a_folder_of_hard_links_to_run_json_leaves_run_json_whole(run: Path, tmp_path: Path) -> None:
    other = copy_run(run, tmp_path / "other")
    names = _written_names(run, ["compare", str(other)], tmp_path / "first")
    out = tmp_path / "out"
    out.mkdir()
    for name in names:
        os.link(run / "run.json", out / name)
    before = fingerprint(run / "run.json")
    outcome = run_cli(["compare", str(run), str(other), "--out", str(out)])
    assert outcome.res.rc == 0, outcome.res.err + outcome.res.tb
    assert fingerprint(run / "run.json") == before, "compare wrote its tables into run.json"
    assert (out / "compare.md").read_text().startswith("# Compare")


def test_compare_into_a_folder_whose_file_is_a_link_to_run_json_is_refused(run: Path, tmp_path: Path) -> None:
    other = copy_run(run, tmp_path / "other")
    out = tmp_path / "out"
    out.mkdir()
    (out / "compare.md").symlink_to(run / "run.json")
    before = fingerprint(run / "run.json")
    outcome = run_cli(["compare", str(run), str(other), "--out", str(out)])
    outcome.refused("compare.md")
    assert fingerprint(run / "run.json") == before


def test_inspect_logs_onto_links_to_a_transcript_are_refused_and_leave_it_whole(run: Path, tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    names = _written_names(run, ["export", "--format", "inspect"], tmp_path / "first")
    out = tmp_path / "out"
    out.mkdir()
    transcript = run / _first_transcript(run)
    for name in names:
        (out / name).symlink_to(transcript)
    before = fingerprint(transcript)
    outcome = run_cli(["export", str(run), "--format", "inspect", "--out", str(out)])
    outcome.refused(names[0])
    assert fingerprint(transcript) == before, "the Inspect logs were written into a transcript"


MISSING_PARENT: list[tuple[str, Callable[[Path, Path], list[str]]]] = [
    ("export-jsonl", lambda run, m: ["export", str(run), "--out", str(m / "sub" / "r.jsonl")]),
    ("export-csv", lambda run, m: ["export", str(run), "--format", "csv", "--out", str(m / "r.csv")]),
    ("export-inspect", lambda run, m: ["export", str(run), "--format", "inspect", "--out", str(m / "sub" / "logs")]),
    ("compare", lambda run, m: ["compare", str(run), str(run.parent / "other"), "--out", str(m / "sub" / "cmp")]),
    ("init", lambda run, m: ["init", "fresh", "--out", str(m / "fresh.yaml")]),
]


@pytest.mark.parametrize("argv", [a for _, a in MISSING_PARENT], ids=[i for i, _ in MISSING_PARENT])
def test_an_output_in_a_folder_that_does_not_exist_is_refused_and_no_folder_is_made(
        run: Path, tmp_path: Path, argv: Callable[[Path, Path], list[str]]) -> None:
    copy_run(run, tmp_path / "other")
    missing = tmp_path / "no-such-folder"
    outcome = run_cli(argv(run, missing))
    outcome.refused("--out")
    assert "does not exist" in outcome.res.err
    assert not missing.exists(), "a folder the user never made was created"
