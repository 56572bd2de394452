"""`medpanel compare` and `medpanel export` on real (scripted) runs."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from medpanel.agents.model.scripted import ScriptedRequest, synthesize
from medpanel.agents.types import Question
from medpanel.experiments.analysis.compare import align, compare_tables, run_labels
from medpanel.experiments.analysis.export import BASE, write_export
from medpanel.experiments.analysis.report import paired_table
from medpanel.experiments.analysis.stats import paired_comparison
from medpanel.experiments.cli.inspect import register
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.store import Row, Store

from .inspect_fixtures import GRID_QUESTIONS, clear_run, grid_run

EXTRA = Question(dataset="medqa", qid="t9", text="Only in run B. Which?", options={"A": "x", "B": "y"}, gold=("B",))


def _always_a(r: ScriptedRequest) -> Any:
    assert r.model is not None
    reply = synthesize(r.model, json.dumps(r.messages, sort_keys=True))
    if "answer" in reply:
        reply["answer"] = "A"
    return reply


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("cmp")
    a = grid_run(base / "one", name="gen", pipeline="generalist", flags={"c": [0, 1]})
    b = grid_run(base / "two", name="gen", pipeline="generalist", flags={"c": [0, 1]},
                 questions=[*GRID_QUESTIONS, EXTRA], responder=_always_a)
    return a, b


def _rows(run_dir: Path) -> list[Row]:
    store = Store(f"sqlite:///{run_dir / 'study.db'}", run_dir)
    try:
        return store.rows()
    finally:
        store.close()


def export_text(run_dir: Path, fmt: str) -> str:
    buf = io.StringIO()
    write_export(run_dir, fmt, buf)
    return buf.getvalue()


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_labels_are_unique_run_names(runs: tuple[Path, Path]) -> None:
    a, b = runs
    assert run_labels([a, b]) == ["one/gen", "two/gen"]  # same dir name: the parent disambiguates
    assert run_labels([a.parent, b.parent]) == ["one", "two"]
    with pytest.raises(UserError):
        run_labels([a, a])


def test_compare_aligns_by_question_and_reuses_paired_stats(runs: tuple[Path, Path]) -> None:
    a, b = runs
    cmp = align([a, b])
    assert cmp.pairs == [("one/gen/c0", "two/gen/c0"), ("one/gen/c1", "two/gen/c1")]
    assert cmp.common == {(q.dataset, q.qid) for q in GRID_QUESTIONS}  # EXTRA is only in run B
    tables = compare_tables(cmp, n_boot=500)
    paired = tables[-1]
    assert [r[:4] for r in paired.rows] == [["one/gen/c0", "two/gen/c0", 0, 3], ["one/gen/c1", "two/gen/c1", 0, 3]]
    # The numbers are exactly report.paired_table's / stats.paired_comparison's on the aligned keys.
    ra = {r.key: r.correct for r in _rows(a) if r.condition == "c1"}
    rb = {r.key: r.correct for r in _rows(b) if r.condition == "c1"}
    direct = paired_comparison("a", ra, "b", rb, n_boot=500)
    row = paired.rows[1]
    assert row[4] == round(100 * direct.acc_a, 1) and row[5] == round(100 * direct.acc_b, 1)
    assert row[8:11] == [direct.b_only, direct.a_only, round(direct.p_mcnemar, 4)]
    assert paired.rows == paired_table(cmp.rows, cmp.pairs, n_boot=500).rows
    acc = tables[1]
    assert acc.title.startswith("Accuracy on the questions every run answered")
    assert {r[2] for r in acc.rows if r[1] == "overall"} == {3}
    # Run B answers A everywhere: its accuracy on the aligned questions is the share with gold A.
    gold_a = sum(q.gold == ("A",) for q in GRID_QUESTIONS)
    assert [r[3] for r in acc.rows if r[0] == "two/gen/c0" and r[1] == "overall"] == [gold_a]


def test_compare_cli_and_errors(runs: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = runs
    res = CliRunner().invoke(_app(), ["compare", str(a), str(b), "--pair", "one/gen/c0,two/gen/c1"])
    assert res.exit_code == 0, res.output
    assert "Paired comparisons" in res.output and "one/gen/c0" in res.output and "two/gen/c1" in res.output
    out = tmp_path / "cmp"
    res = CliRunner().invoke(_app(), ["compare", str(a), str(b), "--pair", "one/gen/c0,two/gen/c1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    import csv

    with (out / "paired_comparisons.csv").open() as fh:
        paired = list(csv.DictReader(fh))
    assert [(r["a"], r["b"]) for r in paired] == [("one/gen/c0", "two/gen/c1")]
    assert {"runs_compared.csv", "compare.md"} <= {p.name for p in out.iterdir()}
    assert "one/gen/c0" in (out / "compare.md").read_text()
    res = CliRunner().invoke(_app(), ["compare", str(a), str(b), "--pair", "one/gen/c0,nope/c9"])
    assert isinstance(res.exception, UserError) and "unknown label 'nope/c9'" in str(res.exception)
    res = CliRunner().invoke(_app(), ["compare", str(a)])
    assert isinstance(res.exception, UserError) and "at least two" in str(res.exception)
    res = CliRunner().invoke(_app(), ["compare", str(a), str(tmp_path)])
    assert isinstance(res.exception, UserError) and "not a run directory" in str(res.exception)


def test_export_jsonl_one_record_per_row(runs: tuple[Path, Path]) -> None:
    _, b = runs
    rows = _rows(b)
    recs = [json.loads(line) for line in export_text(b, "jsonl").splitlines()]
    assert len(recs) == len(rows) == 8
    assert {(r["condition"], r["dataset"], r["qid"], r["repeat"]) for r in recs} == \
        {(r.condition, r.dataset, r.qid, r.repeat) for r in rows}
    by_key = {(r.condition, r.dataset, r.qid): r for r in rows}
    questions = {(q.dataset, q.qid): q for q in [*GRID_QUESTIONS, EXTRA]}
    for rec in recs:
        row = by_key[(rec["condition"], rec["dataset"], rec["qid"])]
        for field in ("answer", "gold", "correct", "invalid", "calls", "logical_calls", "tokens", "transcript"):
            assert rec[field] == getattr(row, field), field
        assert rec["status"] == row.status
        q = questions[(rec["dataset"], rec["qid"])]
        assert rec["question_text"] == q.text and rec["options"] == q.options
        for k, v in row.summary.items():
            if not isinstance(v, dict):
                assert rec[f"summary.{k}"] == v
        assert set(BASE) <= set(rec)
    assert any(k.startswith("final.") for k in recs[0])


def test_export_csv_flattens_to_scalars(runs: tuple[Path, Path], tmp_path: Path) -> None:
    _, b = runs
    out = tmp_path / "x.csv"
    res = CliRunner().invoke(_app(), ["export", str(b), "--format", "csv", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "8 records written" in res.output
    table = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert len(table) == 8
    header = list(table[0])
    assert header[: len(BASE)] == BASE
    first = table[0]
    assert json.loads(first["options"]) == {q.qid: q for q in [*GRID_QUESTIONS, EXTRA]}[first["qid"]].options
    assert first["correct"] in ("True", "False")
    res = CliRunner().invoke(_app(), ["export", str(b), "--format", "xml"])
    assert isinstance(res.exception, UserError) and "--format jsonl, csv or inspect" in str(res.exception)
    default = CliRunner().invoke(_app(), ["export", str(b)])
    assert default.exit_code == 0 and (b / "report" / "results.jsonl").is_file()


def test_export_carries_leak_kinds_after_audit(tmp_path: Path) -> None:
    run_dir = clear_run(tmp_path)
    res = CliRunner().invoke(_app(), ["audit", str(run_dir)])
    assert res.exit_code == 0, res.output
    recs = [json.loads(line) for line in export_text(run_dir, "jsonl").splitlines()]
    leaks = {(r["condition"], r["qid"]): r["leak"] for r in recs}
    assert leaks[("clear-default", "t1")] == "direct"
    assert leaks[("clear-noweb", "t1")] == "" and leaks[("clear-default", "p9")] == ""
    assert {r["summary.route"] for r in recs} == {"web", "parametric"}
