"""A dead endpoint, a wrong key or an unknown model stops the run with one line; error rows are
counted, limited by max_errors, and re-run by --resume --retry-errors. Real HTTP, real CLI."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from medpanel.experiments.run.scenario.runspec import RunSpec
from medpanel.experiments.run.store.transcript_log import count_records, documents, record_path

from .conftest import write
from .fake_openai import FakeOpenAI, completion, schema_reply

KEY = "sk-wrong-0000000000000000000000"
ENV = {**os.environ, "MP_KEY": KEY}


def _scenario(tmp_path: Path, base_url: str, *, workers: int = 4, extra_run: str = "") -> Path:
    return write(tmp_path / "s.yaml", f"""name: endpoint
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: sample}}
model: {{backend: openai, name: nope, base_url: "{base_url}", api_key_env: MP_KEY, max_retries: 1, cache: "off"}}
run: {{workers: {workers}{extra_run}}}
""")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medpanel", "run", "--quiet", *args], capture_output=True, text=True,
                          timeout=180, env=ENV)


def _db(run_dir: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(run_dir / "study.db") as conn:
        return list(conn.execute(sql))


def _status(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "status.json").read_text())


def _assert_stopped_on_one_line(out: subprocess.CompletedProcess[str], run_dir: Path, words: str) -> None:
    logs = out.stdout + out.stderr
    assert out.returncode == 3, logs  # stopped, resumable
    assert "Traceback" not in logs and "Done." not in logs
    lines = [line for line in logs.splitlines() if words in line]
    assert len(lines) == 1, logs  # the cause, once
    status = _status(run_dir)
    assert status["state"] == "stopped" and words in status["reason"], status
    assert status["remaining"] == 24
    # Nothing was recorded as if it were the questions' fault, and nothing stays claimed.
    assert _db(run_dir, "select count(*) from mp_results") == [(0,)]
    assert _db(run_dir, "select count(*) from mp_claims") == [(0,)]
    assert KEY not in logs and KEY not in json.dumps(status)


def test_a_refused_connection_stops_the_run_naming_the_endpoint(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    run_dir = tmp_path / "run"
    out = _cli(str(_scenario(tmp_path, url)), "--run-dir", str(run_dir))
    _assert_stopped_on_one_line(out, run_dir, f"model endpoint {url} refused the connection")
    # At most one question per worker got to fail before the stop, not all 24.
    assert len(_db(run_dir, "select * from mp_executions")) <= 4 + 2


class Switch:
    """Rejects every request with `status` until `ok` is set, then answers."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status, self.body, self.ok = status, body, False
        self.rejected = 0

    def __call__(self, body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        if not self.ok:
            self.rejected += 1
            return self.status, {}, self.body
        return 200, {}, completion(json.dumps(schema_reply(body)))


def test_a_wrong_key_stops_the_run_and_resume_after_the_fix_runs_everything(tmp_path: Path) -> None:
    switch = Switch(401, {"error": {"message": "Incorrect API key provided: sk-wr***0000.", "code": "invalid_api_key",
                                    "type": "invalid_request_error"}})
    run_dir = tmp_path / "run"
    with FakeOpenAI(switch) as srv:
        out = _cli(str(_scenario(tmp_path, srv.base_url)), "--run-dir", str(run_dir))
        cause = f"the endpoint {srv.base_url} rejected the API key from $MP_KEY (401)"
        _assert_stopped_on_one_line(out, run_dir, cause)
        assert switch.rejected <= 6, "the run went on calling an endpoint that refuses its key"
        switch.ok = True
        again = _cli("--resume", str(run_dir))
    assert again.returncode == 0, again.stdout + again.stderr
    assert _db(run_dir, "select count(*), count(error) from mp_results") == [(24, 0)]


def test_an_unknown_model_stops_the_run(tmp_path: Path) -> None:
    switch = Switch(404, {"error": {"message": "The model `nope` does not exist", "code": "model_not_found",
                                    "type": "invalid_request_error"}})
    run_dir = tmp_path / "run"
    with FakeOpenAI(switch) as srv:
        out = _cli(str(_scenario(tmp_path, srv.base_url)), "--run-dir", str(run_dir))
    _assert_stopped_on_one_line(out, run_dir, "has no model 'nope' (404)")


def test_failures_that_look_systematic_but_are_not_become_error_rows(tmp_path: Path) -> None:
    """Two 404s, then the endpoint answers: the two questions are ordinary error rows, the run completes."""

    def handler(body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        if n <= 2:
            return 404, {}, {"error": {"message": "The model `nope` does not exist", "code": "model_not_found"}}
        return 200, {}, completion(json.dumps(schema_reply(body)))

    run_dir = tmp_path / "run"
    with FakeOpenAI(handler) as srv:
        out = _cli(str(_scenario(tmp_path, srv.base_url, workers=1)), "--run-dir", str(run_dir))
    assert out.returncode == 0, out.stdout + out.stderr
    rows = _db(run_dir, "select error_kind from mp_results")
    assert len(rows) == 24 and Counter(k for (k,) in rows) == {None: 22, "http_404": 2}
    assert "2 of 24 pairs are error rows" in out.stdout and "--retry-errors" in out.stdout


def test_max_errors_defaults_to_ten() -> None:
    assert RunSpec().max_errors == 10


def test_the_default_max_errors_stops_a_run_of_errors(tmp_path: Path) -> None:
    def handler(body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        if n == 1:
            return 200, {}, completion(json.dumps(schema_reply(body)))
        return 400, {}, {"error": {"message": "context length exceeded", "type": "invalid_request_error"}}

    run_dir = tmp_path / "run"
    with FakeOpenAI(handler) as srv:
        out = _cli(str(_scenario(tmp_path, srv.base_url, workers=2)), "--run-dir", str(run_dir))
    assert out.returncode == 3, out.stdout + out.stderr
    status = _status(run_dir)
    assert status["state"] == "stopped" and "max_errors=10 exceeded" in status["reason"]
    errors = _db(run_dir, "select count(error) from mp_results")[0][0]
    # The 11th stops it; what each of the 2 workers had finished (one question) or was committing
    # (one more) by then is saved too.
    assert 11 <= errors <= 11 + 2 * 2 and status["errors"] == errors
    assert status["remaining"] > 0


def test_resume_retry_errors_turns_error_rows_into_answers(tmp_path: Path) -> None:
    state = {"fail": True}

    def handler(body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        text = json.dumps(body)
        if state["fail"] and ("Aspirin" in text or "Thiamine" in text):  # s08 and s05, both conditions
            return 400, {}, {"error": {"message": "content filtered", "type": "invalid_request_error"}}
        return 200, {}, completion(json.dumps(schema_reply(body)))

    run_dir = tmp_path / "run"
    with FakeOpenAI(handler) as srv:
        first = _cli(str(_scenario(tmp_path, srv.base_url)), "--run-dir", str(run_dir))
        assert first.returncode == 0, first.stdout + first.stderr
        failed = set(_db(run_dir, "select condition, qid from mp_results where error is not null"))
        assert {q for _, q in failed} == {"s05", "s08"} and len(failed) == 4
        assert "4 of 24 pairs are error rows" in first.stdout and "--retry-errors" in first.stdout
        old_files = {p for (p,) in _db(run_dir, "select transcript from mp_results where error is not null")}

        plain = _cli("--resume", str(run_dir))  # error rows count as done: nothing runs
        assert plain.returncode == 0 and _db(run_dir, "select count(error) from mp_results") == [(4,)]

        refused = _cli(str(tmp_path / "s.yaml"), "--retry-errors")
        assert refused.returncode == 2 and "use it with --resume" in refused.stderr

        state["fail"] = False
        retried = _cli("--resume", str(run_dir), "--retry-errors")
    assert retried.returncode == 0, retried.stdout + retried.stderr
    rows = _db(run_dir, "select condition, qid, error, answer, transcript from mp_results")
    assert len(rows) == 24 and len({(c, q) for c, q, *_ in rows}) == 24
    assert all(e is None and a for _, _, e, a, _ in rows)
    runs = Counter((c, q) for c, _, q, _ in _db(run_dir, "select condition, dataset, qid, repeat from mp_executions"))
    assert {k for k, v in runs.items() if v == 2} == failed and max(runs.values()) == 2
    # The answers' transcripts are there; no row names a replaced error's record (still in its log).
    for c, q, _, _, path in rows:
        doc = json.loads(record_path(run_dir, path).read_text())
        assert doc["question"]["qid"] == q and doc["condition"] == c and not doc["error"]
    assert not old_files & {path for *_, path in rows}
    errors = [d for d in map(json.loads, documents(run_dir)) if d["error"]]
    assert len(errors) == 4 and count_records(run_dir) == 28
    assert "error rows" not in retried.stdout
