"""Transcript (and question page) names are injective and bounded; old run directories still open."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.storage import Pair
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.store.transcript_log import record_path
from medpanel.experiments.view.viewer import build_site, page_name

from .conftest import write
from .rundir_helpers import to_file_per_question

LONG = "L" * 300
# Ids that the old sanitiser mapped to one name: `/`, `_` and ` ` all became `_`, and a repeat's
# `__r1` suffix made `x` at repeat 1 the same file as `x__r1` at repeat 0.
IDS = ["a/b", "a_b", "a b", "x", "x__r1", "../up", LONG, LONG + "M"]


def _dataset(path: Path) -> Path:
    lines = [json.dumps({"realidx": qid, "question": f"Question number {i}?",
                         "options": {"A": "a", "B": "b", "C": "c"}, "answer_idx": "ABC"[i % 3]})
             for i, qid in enumerate(IDS)]
    return write(path, "\n".join(lines) + "\n")


def _scenario(tmp_path: Path) -> Path:
    data = _dataset(tmp_path / "ids.jsonl")
    return write(tmp_path / "s.yaml", f"""name: names
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: jsonl, path: {data}}}
model: {{backend: scripted}}
run: {{workers: 2, repeats: 2}}
""")


def _check_rows(run_dir: Path, expected: int) -> None:
    store = Store(f"sqlite:///{run_dir / 'study.db'}", run_dir)
    rows = store.rows()
    store.close()
    assert len(rows) == expected
    assert not [r for r in rows if r.error], [r.error for r in rows if r.error][:2]
    paths = [r.transcript for r in rows]
    assert len(set(paths)) == len(paths), "two pairs share a transcript"
    for r in rows:
        assert len(Path(r.transcript).name) < 200
        assert ".." not in Path(r.transcript).parts
        doc = json.loads(record_path(run_dir, r.transcript).read_bytes())
        # the file a row points at holds that row's own debate
        assert (doc["condition"], doc["question"]["dataset"], doc["question"]["qid"], doc["repeat"]) == \
            (r.condition, r.dataset, r.qid, r.repeat)


def test_ids_differing_only_in_unsafe_characters_and_long_ids_get_their_own_files(tmp_path: Path) -> None:
    plan = make_plan(load_scenario(_scenario(tmp_path)), base_dir=tmp_path)
    runner = Runner.create(plan, run_dir=tmp_path / "run")
    status = runner.run(install_signals=False)
    assert status["state"] == "complete", status
    _check_rows(runner.run_dir, len(IDS) * 2 * 2)
    # The HTML viewer's question pages: one per (dataset, qid), none shared, none too long.
    build_site(runner.run_dir, plots=False)
    pages = sorted(p.name for p in (runner.run_dir / "report" / "questions").glob("*.html"))
    assert len(pages) == len(IDS)
    assert all(len(p) < 200 for p in pages)
    for qid in IDS:
        html = (runner.run_dir / "report" / "questions" / page_name("ids", qid)).read_text(encoding="utf-8")
        assert f"Question number {IDS.index(qid)}?" in html


def test_show_prints_the_debate_of_the_exact_id(tmp_path: Path) -> None:
    plan = make_plan(load_scenario(_scenario(tmp_path)), base_dir=tmp_path)
    runner = Runner.create(plan, run_dir=tmp_path / "run")
    assert runner.run(install_signals=False)["state"] == "complete"
    out = subprocess.run([sys.executable, "-m", "medpanel", "show", str(runner.run_dir), "a_b", "--condition", "c0"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ids/a_b" in out.stdout and "ids/a/b" not in out.stdout and "ids/a b" not in out.stdout
    assert out.stdout.count("Question number 1?") == 2  # its two repeats, nothing else


def _old_transcript_path(pair: Pair) -> str:
    """The layout before names were hashed: `<dataset>__<qid>[__r<n>].json`, unsafe characters as `_`."""
    condition, dataset, qid, repeat = pair
    suffix = f"__r{repeat}" if repeat else ""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{dataset}__{qid}{suffix}")
    return f"transcripts/{condition}/{safe}.json"


def test_a_run_written_with_the_old_layout_still_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path / "old.yaml", """name: old
pipeline: generalist
flags: {c: [0, 1]}
dataset: {source: sample, limit: 2}
model: {backend: scripted}
run: {workers: 2, repeats: 2}
""")
    plan = make_plan(load_scenario(path), base_dir=tmp_path)
    runner = Runner.create(plan, run_dir=tmp_path / "run")
    assert runner.run(install_signals=False)["state"] == "complete"
    run_dir = runner.run_dir
    to_file_per_question(run_dir, _old_transcript_path)
    store = Store(runner.storage_url, run_dir)
    rows = store.rows()
    store.close()
    old_names = [_old_transcript_path((r.condition, r.dataset, r.qid, r.repeat)) for r in rows]
    assert rows and [r.transcript for r in rows] == old_names  # really the old layout
    assert not list((run_dir / "transcripts").glob("*.jsonl"))
    _check_rows(run_dir, len(rows))
    for cmd in (["report", str(run_dir), "--html"], ["show", str(run_dir), rows[0].qid]):
        out = subprocess.run([sys.executable, "-m", "medpanel", *cmd], capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr
        assert "Traceback" not in out.stderr
    shown = subprocess.run([sys.executable, "-m", "medpanel", "show", str(run_dir), rows[0].qid],
                           capture_output=True, text=True, timeout=120).stdout
    assert f"{rows[0].dataset}/{rows[0].qid}" in shown and "-> " in shown
    page = (run_dir / "report" / "questions" / page_name(rows[0].dataset, rows[0].qid)).read_text(encoding="utf-8")
    assert "transcript missing" not in page.lower()
    # Resuming an old run (nothing left to do) keeps its rows and files as they were.
    assert Runner.open(run_dir).run(install_signals=False)["state"] == "complete"
    _check_rows(run_dir, len(rows))


def test_shared_storage_writes_transcripts_out_where_their_rows_say(tmp_path: Path) -> None:
    """`sync_transcripts` (PostgreSQL runs) follows each row's path: old names stay old, retries keep theirs.
    Run on SQLite with the store told it is shared, which takes the same statements."""
    from medpanel.agents.types import Question, QuestionResult

    store = Store(f"sqlite:///{tmp_path / 'study.db'}", tmp_path)
    store.shared = True
    q = Question(dataset="d", qid="a/b", text="t?", options={"A": "x", "B": "y"}, gold=("A",))
    base = {"condition": "c0", "dataset": "d", "qid": "a/b", "gold": ("A",)}
    failed = QuestionResult(**base, error="http_400: no", error_kind="http_400")
    store.commit(failed, q, "me")
    store.commit(QuestionResult(**{**base, "qid": "x"}, answer=("A",), correct=True),
                 q.model_copy(update={"qid": "x"}), "me")
    store.commit(QuestionResult(**base, answer=("B",)), q, "me", replace_error=True)  # a --retry-errors result
    rows = {r.qid: r for r in store.rows()}
    assert rows["a/b"].answer == "B" and rows["a/b"].error is None
    log = tmp_path / store.log.name
    store.close()
    # Another machine's log is not in this folder: each record is copied to the bytes its row names.
    log.unlink()
    reader = Store(f"sqlite:///{tmp_path / 'study.db'}", tmp_path)
    reader.shared = True
    assert reader.sync_transcripts() == 2
    for r in rows.values():
        doc = json.loads(record_path(tmp_path, r.transcript).read_bytes())
        assert doc["question"]["qid"] == r.qid and doc["answer"] == list(r.answer.split(","))
    # Rows of an older run name a file per question: each is written out under its own name.
    to_file_per_question(tmp_path, lambda pair: _old_transcript_path(pair).replace(".json", ".retry-1.json"))
    for r in reader.rows():
        (tmp_path / r.transcript).unlink()
    assert reader.sync_transcripts() == 2
    for r in reader.rows():
        assert ".retry-1.json" in r.transcript
        doc = json.loads((tmp_path / r.transcript).read_text())
        assert doc["question"]["qid"] == r.qid and doc["answer"] == list(r.answer.split(","))
    reader.close()
