"""Run directories written before records were versioned (no format_version anywhere) still open with every reader.

The fixture runs (tests/fixtures/v0, see its README) were written by the code before the typed,
versioned records; `golden/` holds what that code wrote for them. The readers of today must give
the same tables, the same export and the same comparison, and build the HTML report.
"""

from __future__ import annotations

import io
import json
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from medpanel.experiments.cli.main import main
from medpanel.experiments.run.store.records import TRANSCRIPT_FORMAT

from .cli_helpers import output_of as cli

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "v0"
GOLDEN = FIXTURE / "golden"
RUNS = ("v0-panel", "v0-clear")


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the fixture runs (readers write report/ into a run directory)."""
    for name in RUNS:
        shutil.copytree(FIXTURE / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_fixture_is_format_0() -> None:
    for name in RUNS:
        for path in (FIXTURE / name).rglob("*.json"):
            assert "format_version" not in path.read_text(encoding="utf-8"), path


@pytest.mark.parametrize("name", RUNS)
def test_report_of_an_old_run_writes_the_same_tables(runs: Path, name: str) -> None:
    cli("report", name)
    assert (runs / name / "report" / "report.md").read_text(encoding="utf-8") == \
        (GOLDEN / f"{name}.report.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", RUNS)
def test_export_of_an_old_run_is_the_same(runs: Path, name: str) -> None:
    assert cli("export", name, "--format", "jsonl", "--out", "-") == \
        (GOLDEN / f"{name}.export.jsonl").read_text(encoding="utf-8")


def test_compare_of_old_runs_is_the_same(runs: Path) -> None:
    cli("compare", *RUNS, "--out", "cmp")
    assert (runs / "cmp" / "compare.md").read_text(encoding="utf-8") == \
        (GOLDEN / "compare.md").read_text(encoding="utf-8")


def test_show_of_an_old_run_prints_every_condition(runs: Path) -> None:
    panel = cli("show", "v0-panel", "s02")
    for slug in ("c0r0", "c1r1", "c1r0k1-clear"):
        assert f"{slug}  medqa-style/s02" in panel
    assert "challenger" in panel and "selector" in panel
    clear = cli("show", "v0-clear", "s02", "--condition", "clear-default")
    assert "clear-default  medqa-style/s02" in clear and "verifier" in clear and "direct  medqa" not in clear


def test_html_report_of_an_old_run_builds(runs: Path) -> None:
    for name in RUNS:
        cli("report", name, "--html")
        report = runs / name / "report"
        index = (report / "index.html").read_text(encoding="utf-8")
        pages = list((report / "questions").glob("*.html"))
        assert len(pages) == 1 and "s02" in index
        page = pages[0].read_text(encoding="utf-8")
        assert "route " in page if name == "v0-clear" else "material weakness:" in page


def test_the_old_records_read_as_format_0() -> None:
    from medpanel.experiments.run.store.rundir import load_record, load_transcript

    for name in RUNS:
        record = load_record(FIXTURE / name)
        assert record.format_version == 0 and record.plan is None and record.name == name
        for path in sorted((FIXTURE / name / "transcripts").rglob("*.json")):
            transcript = load_transcript(path)
            assert transcript.format_version == 0 and "format_version" not in transcript.summary
            assert transcript.events and all(e.kind in ("call", "note", "vote", "decision", "error")
                                            for e in transcript.events)


def test_an_old_run_resumes_from_its_scenario(runs: Path) -> None:
    """A run.json without a plan block is planned again from its scenario when it is opened."""
    from medpanel.experiments.run.execution.runner import Runner

    runner = Runner.open(runs / "v0-panel")
    resolved = runner.plan.resolved
    assert resolved.name == "panel" and set(resolved.plans) == {"c0r0", "c1r1", "c1r0k1-clear"}
    assert resolved.plans["c1r0k1-clear"].model_dump()["evidence"] == "clear"


def cli_refusal(*argv: str) -> str:
    """The one line a refused command prints; the test fails unless it exits 2 with no traceback."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2, err.getvalue()
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err.getvalue(), err.getvalue()
    return lines[0]


def _edit(path: Path, **keys: object) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    for key, value in keys.items():
        *parents, last = key.split("__")
        target = doc
        for p in parents:
            target = target[p]
        target[last] = value
    path.write_text(json.dumps(doc), encoding="utf-8")


def test_format_1_added_only_fields_that_format_0_means_by_leaving_out() -> None:
    """Why there is no 0 -> 1 conversion: every key of the format-0 files is a field of today's
    records, and each field format 1 added reads as what its absence meant."""
    from medpanel.experiments.run.store.records import RunRecord, TranscriptRecord
    from medpanel.experiments.run.store.rundir import load_record, load_transcript

    for name in RUNS:
        doc = json.loads((FIXTURE / name / "run.json").read_text(encoding="utf-8"))
        added = set(RunRecord.model_fields) - set(doc)
        assert added <= {"format_version", "run_id", "plan", "tracker"}, added
        record = load_record(FIXTURE / name)
        assert (record.run_id, record.plan, record.tracker) == (None, None, None)
        assert record.model_dump(mode="json", exclude_unset=True) == doc  # nothing dropped, nothing changed
        for path in sorted((FIXTURE / name / "transcripts").rglob("*.json")):
            tdoc = json.loads(path.read_text(encoding="utf-8"))
            assert set(TranscriptRecord.model_fields) - set(tdoc) <= {"format_version", "cached_tokens",
                                                                     "cache_saved_usd"}
            transcript = load_transcript(path)
            assert (transcript.cached_tokens, transcript.cache_saved_usd) == (0, 0.0)


@pytest.mark.parametrize(("where", "keys", "field"), [
    ("transcript", {"recruted": 3}, "recruted"),
    ("transcript", {"question__gold_letter": "C"}, "question.gold_letter"),
    ("run.json", {"recruted": 3}, "recruted"),
    ("run.json", {"model__temprature": 0.5}, "model.temprature"),
])
def test_a_misspelled_field_on_disk_is_refused_naming_it(runs: Path, where: str, keys: dict[str, object],
                                                        field: str) -> None:
    run = runs / "v0-panel"
    path = run / "run.json" if where == "run.json" else \
        next(iter(sorted((run / "transcripts").rglob("*.json"))))
    _edit(path, **keys)
    line = cli_refusal("report", "v0-panel")
    assert line.startswith(f"error: {path.relative_to(runs)}: {field}: is not a field of a medpanel {where} "
                           "(a misspelling"), line


def test_a_transcript_of_a_newer_format_is_refused(runs: Path) -> None:
    path = next(iter(sorted((runs / "v0-clear" / "transcripts").rglob("*.json"))))
    newer = TRANSCRIPT_FORMAT + 1
    _edit(path, format_version=newer, added_later=True)
    line = cli_refusal("report", "v0-clear")
    assert line.startswith(f"error: {path.relative_to(runs)}: was written in transcript format {newer}, newer than "
                           f"this medpanel reads (format {TRANSCRIPT_FORMAT}). Upgrade medpanel"), line
