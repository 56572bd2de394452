"""`medpanel corpus ingest|search|list` through typer's runner, on a corpus written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from medpanel.experiments.cli.corpus import corpus_app
from medpanel.retrieval import clear_retriever_cache

RECORDS = [
    {"id": "c1", "title": "Lithium toxicity", "content": "Thiazides and NSAIDs raise lithium levels."},
    {"id": "c2", "title": "Graves disease", "content": "Methimazole can cause agranulocytosis."},
]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEDPANEL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "200")  # rich tables must not fold ids in the assertions
    clear_retriever_cache()
    return tmp_path / "home"


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in RECORDS) + '\n{"id": "bad"\n', encoding="utf-8")
    return path


def test_ingest_search_list(jsonl: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(corpus_app, ["ingest", str(jsonl), "--name", "mini", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "mini: 2 docs (2 new, 0 updated, 0 unchanged)" in result.stdout
    assert "1 malformed lines skipped" in result.stdout
    assert f"{jsonl}:3:" in result.stderr  # the skipped line, named by file:line

    result = runner.invoke(corpus_app, ["search", "mini", "lithium thiazides", "-k", "1"])
    assert result.exit_code == 0, result.output
    assert "c1" in result.stdout and "Lithium toxicity" in result.stdout and "c2" not in result.stdout

    result = runner.invoke(corpus_app, ["list"])
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if "mini" in line)
    cells = [cell.strip() for cell in row.split("│")][1:-1]
    assert cells[:2] == ["mini", "2"] and cells[2].endswith("KB") and cells[3] == "no"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["search", "nosuch", "q"], "unknown corpus 'nosuch'"),
        (["ingest", "/nonexistent/x.jsonl", "--name", "x"], "no such file or folder"),
        (["ingest", "{jsonl}", "--name", "../up"], "is not allowed"),
        (["search", "mini", "q", "--retriever", "dense"], "has no dense index"),
    ],
)
def test_user_errors_exit_2_with_one_line(jsonl: Path, args: list[str], expected: str) -> None:
    runner = CliRunner()
    assert runner.invoke(corpus_app, ["ingest", str(jsonl), "--name", "mini", "--no-progress"]).exit_code == 0
    result = runner.invoke(corpus_app, [a.replace("{jsonl}", str(jsonl)) for a in args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]
    assert "Traceback" not in result.output
