"""What a resume (and a reader) takes from a run directory: its own study, its own plan, its own
questions read back as written, its own status; and readers that cannot show what was asked fail.

Through the console's `main` like the hostile-input probes, plus real `medpanel run` processes
killed with SIGKILL and resumed.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.run.store.transcript_log import record_path
from tests.rundir_helpers import SCENARIO, copy_run, created_run, fingerprint, finished_run, run_cli, transcripts
from tests.transcript_files import remove, transcript_files


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("resume-base")
    return {"created": created_run(root, name="created"), "finished": finished_run(root, name="finished")}


def _sql(run: Path, *statements: str) -> None:
    with sqlite3.connect(run / "study.db") as conn:
        for s in statements:
            conn.execute(s)
    conn.close()


def _rows(run: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(run / "study.db") as conn:
        rows = [(str(r[0]), str(r[1]), str(r[2])) for r in
                conn.execute("select condition, qid, transcript from mp_results order by condition, qid")]
    conn.close()
    return rows


# -- a study.db emptied, stripped or replaced ------------------------------------------------------


def _empty(run: Path) -> None:
    (run / "study.db").write_bytes(b"")


def _fresh(run: Path) -> None:
    (run / "study.db").unlink()
    _sql(run, "PRAGMA user_version = 7")  # a valid SQLite file without a table


STUDY_DAMAGE: list[tuple[str, Callable[[Path], None]]] = [
    ("zero-length", _empty),
    ("results-dropped", lambda run: _sql(run, "drop table mp_results")),
    ("meta-dropped", lambda run: _sql(run, "drop table mp_meta")),
    ("run-json-copy-deleted", lambda run: _sql(run, "delete from mp_meta where key = 'run_json'")),
    ("no-tables", _fresh),
]
STUDY_COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "resume": lambda run: ["run", "--resume", str(run), "--quiet"],
    "report": lambda run: ["report", str(run)],
    "show": lambda run: ["show", str(run), "s01"],
    "export": lambda run: ["export", str(run), "--out", str(run.parent / "x.jsonl")],
}


@pytest.mark.parametrize("command", list(STUDY_COMMANDS))
@pytest.mark.parametrize(("damage_id", "damage"), STUDY_DAMAGE, ids=[d[0] for d in STUDY_DAMAGE])
def test_a_study_that_is_not_this_runs_is_refused_and_no_transcript_is_rewritten(
        bases: dict[str, Path], tmp_path: Path, command: str, damage_id: str, damage: Callable[[Path], None]) -> None:
    run = copy_run(bases["finished"], tmp_path / "run")
    damage(run)
    before = transcripts(run)
    study = fingerprint(run / "study.db")
    outcome = run_cli(STUDY_COMMANDS[command](run))
    outcome.refused("study.db")
    assert transcripts(run) == before
    assert fingerprint(run / "study.db") == study, "the refused study was written to"


def test_rows_removed_from_the_study_run_again_without_overwriting_any_transcript(
        bases: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(bases["finished"], tmp_path / "run")
    old = _rows(run)
    before = transcripts(run)
    _sql(run, "delete from mp_results where condition = 'c1'")
    outcome = run_cli(["run", "--resume", str(run), "--quiet"])
    assert outcome.res.rc == 0, outcome.res.err + outcome.res.tb
    after = transcripts(run)
    assert {k: after[k] for k in before} == before, "a transcript of an earlier execution was overwritten"
    new = _rows(run)
    assert len(new) == len(old)
    reran = {(c, q): t for c, q, t in new if c == "c1"}
    assert reran and all(t not in before for t in reran.values()), "a re-run row points at an old file"


def test_a_stray_transcript_at_a_pairs_name_is_kept_and_the_pair_gets_its_own(
        bases: dict[str, Path], tmp_path: Path) -> None:
    finished = bases["finished"]
    run = copy_run(bases["created"], tmp_path / "run")
    names = [t for _, _, t in _rows(finished)]  # where each pair's transcript goes (names are the key's)
    for name in names:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text('{"stray": "another execution"}')
    outcome = run_cli(["run", "--resume", str(run), "--quiet"])
    assert outcome.res.rc == 0, outcome.res.err + outcome.res.tb
    for name in names:
        assert (run / name).read_text() == '{"stray": "another execution"}'
    assert all(t not in names for _, _, t in _rows(run))


# -- run.json edited between a crash and a resume -------------------------------------------------


def _edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        doc = json.loads((run / "run.json").read_text())
        change(doc)
        (run / "run.json").write_text(json.dumps(doc, indent=2))
    return edit


def _drop_c1(doc: dict[str, Any]) -> None:
    doc["conditions"] = doc["conditions"][:1]
    doc["scenario"]["flags"] = {"c": [0]}


EDITS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("model-name", lambda d: d["scenario"]["model"].update(name="another-model"), "scenario.model.name"),
    ("temperature", lambda d: d["scenario"]["model"].update(temperature=0.9), "scenario.model.temperature"),
    ("latency", lambda d: d["scenario"]["model"].update(latency_ms=5.0), "scenario.model.latency_ms"),
    ("summary-model", lambda d: d["model"].update(name="another-model"), "model.name"),
    ("conditions", _drop_c1, "conditions"),
    ("repeats", lambda d: d.update(repeats=2), "repeats"),
    ("plan-settings", lambda d: d["plan"]["settings"].update(k=4), "plan.settings.k"),
    ("dataset-limit", lambda d: d["scenario"]["dataset"].update(limit=1), "scenario.dataset.limit"),
    ("shard-size", lambda d: d.update(shard_size=1), "shard_size"),
    ("run-budget", lambda d: d["scenario"]["run"].update(max_calls=3), "scenario.run.max_calls"),
]


@pytest.mark.parametrize(("change", "field"), [(c, f) for _, c, f in EDITS], ids=[i for i, _, _ in EDITS])
def test_a_run_json_edited_after_creation_is_refused_on_resume(
        bases: dict[str, Path], tmp_path: Path, change: Callable[[dict[str, Any]], None], field: str) -> None:
    run = copy_run(bases["created"], tmp_path / "run")
    _edit(change)(run)
    outcome = run_cli(["run", "--resume", str(run), "--quiet"])
    outcome.refused("run.json")
    assert f"{field} differs" in outcome.res.err, outcome.res.err
    assert _rows(run) == [], "a pair ran on the edited plan"


# -- questions.jsonl read back as it was written ------------------------------------------------

SEPARATORS = {"line-separator": "\u2028", "paragraph-separator": "\u2029", "next-line": "\x85"}


def _dataset(tmp_path: Path, where: str, sep: str) -> Path:
    rows = []
    for i in range(2):
        q = {"realidx": f"q{i}", "question": f"Which one{sep}is right?", "answer_idx": "A",
             "options": {"A": "first", "B": "second"}}
        if where == "option":
            q["question"], q["options"]["B"] = "Which one?", f"sec{sep}ond"
        rows.append(json.dumps(q))  # ensure_ascii: the dataset file itself has one record a line
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("where", ["question", "option"])
@pytest.mark.parametrize("sep", list(SEPARATORS.values()), ids=list(SEPARATORS))
def test_a_question_holding_a_unicode_line_separator_runs_resumes_and_exports(
        tmp_path: Path, sep: str, where: str) -> None:
    data = _dataset(tmp_path, where, sep)
    body = SCENARIO.replace("dataset: {source: sample, limit: 2}", f"dataset: {{source: jsonl, path: {data}}}")
    run = created_run(tmp_path, body)
    assert sep in (run / "questions.jsonl").read_text(encoding="utf-8")  # written as JSON keeps it
    outcome = run_cli(["run", "--resume", str(run), "--quiet"])
    assert outcome.res.rc == 0, outcome.res.err + outcome.res.tb
    out = tmp_path / "x.jsonl"
    outcome = run_cli(["export", str(run), "--out", str(out)])
    assert outcome.res.rc == 0, outcome.res.err + outcome.res.tb
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").split("\n") if line]
    assert len(records) == 4
    assert all(sep in json.dumps(r, ensure_ascii=False) for r in records)


def test_a_provenance_file_with_a_raw_line_separator_in_a_string_is_read(
        bases: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(bases["finished"], tmp_path / "run")
    qid = _rows(run)[0][1]
    dataset = json.loads((run / "questions.jsonl").read_text().split("\n")[0])["dataset"]
    line = json.dumps({"dataset": dataset, "qid": qid, "title": "A title\u2028on two lines"}, ensure_ascii=False)
    (tmp_path / "p.jsonl").write_text(line + "\n", encoding="utf-8")
    outcome = run_cli(["audit", str(run), "--provenance", str(tmp_path / "p.jsonl")])
    assert outcome.res.rc == 0, outcome.res.err + outcome.res.tb


def test_a_dataset_with_a_raw_line_separator_in_a_string_validates(tmp_path: Path) -> None:
    line = json.dumps({"realidx": "q1", "question": "Which\u2028one?", "answer_idx": "A",
                       "options": {"A": "x", "B": "y"}}, ensure_ascii=False)
    (tmp_path / "q.jsonl").write_text(line + "\n", encoding="utf-8")
    body = SCENARIO.replace("dataset: {source: sample, limit: 2}", "dataset: {source: jsonl, path: q.jsonl}")
    (tmp_path / "s.yaml").write_text(body)
    outcome = run_cli(["validate", str(tmp_path / "s.yaml")])
    assert outcome.res.rc == 0, outcome.res.err + outcome.res.tb


# -- status.json that is not the runner's ----------------------------------------------------------

GARBAGE: dict[str, bytes] = {
    "not-json": b"{broken",
    "a-list": b"[]",
    "no-state": b"{}",
    "unknown-state": b'{"state": "nonsense"}',
    "binary": b"\x00\x01\x02garbage",
    "empty": b"",
}


@pytest.mark.parametrize("body", list(GARBAGE.values()), ids=list(GARBAGE))
def test_a_resume_refuses_a_status_file_that_is_not_the_runners(
        bases: dict[str, Path], tmp_path: Path, body: bytes) -> None:
    run = copy_run(bases["created"], tmp_path / "run")
    (run / "status.json").write_bytes(body)
    outcome = run_cli(["run", "--resume", str(run), "--quiet"])
    outcome.refused("status.json")
    assert (run / "status.json").read_bytes() == body
    assert _rows(run) == []


# -- readers that cannot show what was asked -------------------------------------------------------


def _transcript_of(run: Path, condition: str, qid: str = "s01") -> Path:
    return record_path(run, next(t for c, q, t in _rows(run) if c == condition and q == qid))


def test_show_of_a_question_whose_transcripts_are_all_gone_fails(bases: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(bases["finished"], tmp_path / "run")
    for condition in ("c0", "c1"):
        remove(_transcript_of(run, condition))
    outcome = run_cli(["show", str(run), "s01"])
    outcome.refused("is missing")
    assert "nothing to show" in outcome.res.err


def test_show_of_one_condition_whose_transcript_is_gone_fails(bases: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(bases["finished"], tmp_path / "run")
    remove(_transcript_of(run, "c0"))
    run_cli(["show", str(run), "s01", "--condition", "c0"]).refused("is missing")


def test_show_of_a_transcript_outside_the_run_fails(bases: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(bases["finished"], tmp_path / "run")
    (tmp_path / "outside.json").write_bytes(_transcript_of(run, "c0").read_bytes())
    _sql(run, "update mp_results set transcript = '../outside.json' where qid = 's01'")
    run_cli(["show", str(run), "s01"]).refused("leaves the run directory")


def test_show_says_on_stderr_which_transcript_it_could_not_show(bases: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(bases["finished"], tmp_path / "run")
    gone = _transcript_of(run, "c0")
    remove(gone)
    outcome = run_cli(["show", str(run), "s01"])
    assert outcome.res.rc == 0, outcome.res.err + outcome.res.tb
    assert "warning:" in outcome.res.err and str(gone) in outcome.res.err


def test_report_html_without_any_transcript_fails_before_writing(bases: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(bases["finished"], tmp_path / "run")
    for path in transcript_files(run):
        path.unlink()
    outcome = run_cli(["report", str(run), "--html"])
    outcome.refused("transcripts")
    assert not (run / "report" / "index.html").exists()


def test_report_says_when_transcripts_are_missing(bases: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(bases["finished"], tmp_path / "run")
    remove(_transcript_of(run, "c1"))
    outcome = run_cli(["report", str(run)])
    assert outcome.res.rc == 0, outcome.res.err + outcome.res.tb
    assert "warning: condition c1: 1 of" in outcome.res.err


# -- real runs killed with SIGKILL, then resumed ------------------------------------------------------

SLOW = SCENARIO.replace("model: {backend: scripted}", "model: {backend: scripted, latency_ms: 150}").replace(
    "limit: 2", "limit: 6")


def _started(tmp_path: Path, body: str = SLOW) -> tuple[Path, subprocess.Popen[str]]:
    (tmp_path / "s.yaml").write_text(body)
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "medpanel", "run", str(tmp_path / "s.yaml"), "--run-dir", str(run),
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        if (run / "study.db").exists() and (run / "run.json").exists() and _done(run) >= 2:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert 2 <= _done(run) < _pairs(run), "the kill did not land mid-run"
    return run, proc


def _done(run: Path) -> int:
    try:
        with sqlite3.connect(run / "study.db", timeout=10) as conn:
            n = int(conn.execute("select count(*) from mp_results").fetchone()[0])
        conn.close()
        return n
    except sqlite3.Error:
        return 0


def _pairs(run: Path) -> int:
    return int(json.loads((run / "run.json").read_text())["n_pairs"])


def _resume(run: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medpanel", "run", "--resume", str(run), "--quiet"],
                          capture_output=True, text=True, timeout=300)


def _one_line(proc: subprocess.CompletedProcess[str], names: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_killed_run_whose_lock_became_a_link_is_refused_then_finishes_once_it_is_a_file(tmp_path: Path) -> None:
    run, _ = _started(tmp_path)
    target = tmp_path / "precious.txt"
    target.write_text("not a lock\n")
    (run / "runner.lock").unlink(missing_ok=True)
    (run / "runner.lock").symlink_to(target)
    _one_line(_resume(run), "runner.lock")
    assert target.read_text() == "not a lock\n"
    (run / "runner.lock").unlink()
    done = _resume(run)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _done(run) == _pairs(run)


def test_killed_run_whose_run_json_names_another_model_is_refused_then_finishes_with_its_own(
        tmp_path: Path) -> None:
    run, _ = _started(tmp_path)
    own = (run / "run.json").read_text()
    _edit(lambda d: d["scenario"]["model"].update(name="another-model"))(run)
    before = _done(run)
    _one_line(_resume(run), "scenario.model.name differs")
    assert _done(run) == before
    (run / "run.json").write_text(own)
    done = _resume(run)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _done(run) == _pairs(run)


def test_killed_run_with_line_separators_in_its_questions_resumes(tmp_path: Path) -> None:
    rows = [json.dumps({"realidx": f"q{i}", "question": f"Case {i}:\u2028which?\x85really\u2029now?",
                        "answer_idx": "A", "options": {"A": "x", "B": "y"}}) for i in range(12)]
    (tmp_path / "q.jsonl").write_text("\n".join(rows) + "\n")
    data = tmp_path / "q.jsonl"
    body = SLOW.replace("dataset: {source: sample, limit: 6}", f"dataset: {{source: jsonl, path: {data}}}")
    run, _ = _started(tmp_path, body)
    done = _resume(run)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _done(run) == _pairs(run)


def test_killed_run_whose_study_was_emptied_is_refused_and_keeps_its_transcripts(tmp_path: Path) -> None:
    run, _ = _started(tmp_path)
    with sqlite3.connect(run / "study.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = transcripts(run)
    assert before
    (run / "study.db").write_bytes(b"")
    for suffix in ("-wal", "-shm"):
        (run / f"study.db{suffix}").unlink(missing_ok=True)
    _one_line(_resume(run), "study.db")
    assert transcripts(run) == before
