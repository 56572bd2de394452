"""The second hostile probe: writes where medpanel should not, waits without end, tracebacks, inputs
accepted silently, misleading messages and leaks through a scenario.

Each case goes through `medpanel.experiments.cli.main` like the first probe (tests/test_bad_inputs.py,
whose workspace and checks it reuses): a bad input is one `error:` line, exit 2, no traceback, and
the line names the file or field. Cases that are not refusals (a note a reader prints, a record
left intact) assert that directly.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from medpanel.experiments.run.store.rundir import load_run, transcript_path
from medpanel.experiments.run.store.runlock import run_lock
from tests.test_bad_inputs import (
    GOOD,
    QUESTION,
    Case,
    Result,
    Workspace,
    _first_transcript,
    base_run,
    invoke,
    shape_problem,
    ws,
)
from tests.transcript_files import remove, rewrite

__all__ = ["base_run", "ws"]  # the first probe's fixtures, used here

BAD: list[Case] = []


def bad(case_id: str, expect: str) -> Callable[[Callable[[Workspace], list[str]]], Callable[[Workspace], list[str]]]:
    def deco(fn: Callable[[Workspace], list[str]]) -> Callable[[Workspace], list[str]]:
        BAD.append(Case(case_id, fn, expect))
        return fn
    return deco


def check_refused(res: Result, expect: str, argv: list[str]) -> None:
    problem = shape_problem(res)
    assert problem is None, f"{argv}: {problem}"
    assert expect.lower() in res.err.lower(), f"{argv}: the line does not name {expect!r}: {res.err}"


def other_run(ws: Workspace) -> Path:
    """A second, independent run (another run id, two questions) in the workspace."""
    dest = ws.path("other-run")
    if not dest.exists():
        body = GOOD.replace("name: probe", "name: other").replace("limit: 1", "limit: 2")
        res = invoke(["run", ws.scenario(body, "other.yaml"), "--run-dir", str(dest), "--quiet"])
        assert res.rc == 0, res.err + res.tb
    return dest


# -- writes where it should not ---------------------------------------------------------------------

def _foreign_folder(ws: Workspace) -> str:
    ws.text("mine/notes.txt", "my thesis")
    ws.text("mine/status.json", '{"mine": true}')
    return str(ws.path("mine"))


def _foreign_db(ws: Workspace) -> str:
    folder = ws.path("db-folder")
    folder.mkdir()
    with sqlite3.connect(folder / "study.db") as conn:
        conn.execute("create table patients (id integer)")
    return str(folder)


def _cache_only(ws: Workspace) -> str:
    ws.text("cached/cache/x", "someone's cache")
    return str(ws.path("cached"))


def _swapped(part: str) -> Callable[[Workspace], str]:
    def make(ws: Workspace) -> str:
        run = ws.run()
        shutil.copy(other_run(ws) / part, run / part)
        return str(run)
    return make


for case_id, make_dir in [("run-dir-foreign-files", _foreign_folder), ("run-dir-foreign-study-db", _foreign_db),
                          ("run-dir-foreign-cache", _cache_only)]:
    bad(case_id, "not a medpanel run")(lambda ws, make_dir=make_dir: ["run", ws.scenario(), "--run-dir",
                                                                        make_dir(ws), "--quiet"])
for name in ("run.json", "study.db", "questions.jsonl", "status.json", "transcripts/c0/x.json"):
    bad(f"export-into-records-{name.split('/')[0]}", "--out")(
        lambda ws, name=name: ["export", str(ws.run()), "--out", str(ws.run() / name)])
bad("export-inspect-into-transcripts", "--out")(
    lambda ws: ["export", str(ws.run()), "--format", "inspect", "--out", str(ws.run() / "transcripts")])
bad("compare-out-into-cache", "--out")(
    lambda ws: ["compare", str(ws.run()), str(ws.run("b")), "--out", str(ws.run() / "cache")])
bad("resume-run-json-of-another-run", "run.json")(lambda ws: ["run", "--resume", _swapped("run.json")(ws), "--quiet"])
bad("resume-questions-of-another-run", "questions.jsonl")(
    lambda ws: ["run", "--resume", _swapped("questions.jsonl")(ws), "--quiet"])
bad("resume-study-of-another-run", "run.json")(lambda ws: ["run", "--resume", _swapped("study.db")(ws), "--quiet"])


def test_run_dir_root_is_refused(ws: Workspace) -> None:
    argv = ["run", ws.scenario(), "--run-dir", "/", "--quiet"]
    check_refused(invoke(argv), "root", argv)
    assert not Path("/run.json").exists() and not Path("/study.db").exists()


def test_foreign_folder_is_left_as_it_was(ws: Workspace) -> None:
    folder = Path(_foreign_folder(ws))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    invoke(["run", ws.scenario(), "--run-dir", str(folder), "--quiet"])
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_interrupted_creation_may_still_be_reused(ws: Workspace) -> None:
    """A folder holding only what a killed creation writes (no run.json yet) is medpanel's own."""
    run = ws.run()
    (run / "run.json").unlink()
    for name in ("status.json", "transcripts", "cache", "report"):
        p = run / name
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    res = invoke(["run", ws.scenario(), "--run-dir", str(run), "--quiet"])
    assert res.rc == 0, res.err + res.tb


def test_export_leaves_run_json_intact(ws: Workspace) -> None:
    run = ws.run()
    before = (run / "run.json").read_bytes()
    invoke(["export", str(run), "--out", str(run / "run.json")])
    assert (run / "run.json").read_bytes() == before
    assert invoke(["report", str(run)]).rc == 0


def _drop_one_row(run: Path) -> None:
    with sqlite3.connect(run / "study.db") as conn:
        conn.execute("delete from mp_results where rowid = (select min(rowid) from mp_results)")


@pytest.mark.parametrize("command", ["report", "export", "show", "view"])
def test_readers_say_a_running_run_is_in_progress(command: str, ws: Workspace) -> None:
    run = ws.run()
    with sqlite3.connect(run / "study.db") as conn:
        qid = str(conn.execute("select qid from mp_results limit 1").fetchone()[0])
    total = json.loads((run / "run.json").read_text())["n_pairs"]
    _drop_one_row(run)
    argv = {"report": ["report", str(run)], "export": ["export", str(run), "--out", "-"],
            "show": ["show", str(run), qid], "view": ["view", str(run), "--rebuild", "--port", "0"]}[command]
    with run_lock(run, "probe-holder"):
        res = invoke(argv)
    assert res.rc == 0, res.err + res.tb
    assert f"in progress: {total - 1} of {total}" in res.err, res.err
    res = invoke(argv)  # no process holds it now: it stopped short
    assert f"incomplete: {total - 1} of {total}" in res.err and "--resume" in res.err, res.err


def test_a_finished_run_gets_no_note(ws: Workspace) -> None:
    res = invoke(["report", str(ws.run())])
    assert res.rc == 0 and "progress" not in res.err and "incomplete" not in res.err, res.err


# -- waits forever: only regular files are opened -----------------------------------------------------

def _fifo(ws: Workspace, name: str) -> str:
    path = ws.path(name)
    os.mkfifo(path)
    return str(path)


bad("fifo-scenario", "FIFO")(lambda ws: ["validate", _fifo(ws, "s.yaml")])
bad("fifo-dataset", "FIFO")(lambda ws: [_fifo(ws, "q.jsonl"), "validate",
                                        ws.with_dataset("{source: jsonl, path: q.jsonl}")][1:])
bad("dev-zero-dataset", "device")(lambda ws: ["validate", ws.with_dataset("{source: jsonl, path: /dev/zero}")])
bad("fifo-prompt-file", "FIFO")(lambda ws: [_fifo(ws, "p.md"), "validate",
                                            ws.scenario(GOOD + "prompts: {generalist: p.md}\n")][1:])
bad("fifo-provenance", "FIFO")(lambda ws: ["audit", str(ws.run()), "--provenance", _fifo(ws, "p.jsonl")])


# -- mistakes that ended in a traceback or the wrong exit code ---------------------------------------

def _model(ws: Workspace, model: str, *, name: str = "s.yaml") -> str:
    return ws.scenario(GOOD.replace("model: {backend: scripted}", f"model: {model}"), name)


NO_KEY = "api_key_env: MEDPANEL_PROBE_NO_KEY"
for case_id, model, expect in [
    ("key-missing-remote-url", f"{{backend: openai, name: m, base_url: 'https://api.example.org/v1', {NO_KEY}}}",
     "MEDPANEL_PROBE_NO_KEY"),
    ("key-missing-no-url", f"{{backend: openai, name: m, {NO_KEY}}}", "MEDPANEL_PROBE_NO_KEY"),
    ("key-missing-azure-no-url", f"{{backend: azure, name: m, {NO_KEY}}}", "model.base_url"),
]:
    bad(case_id, expect)(lambda ws, model=model: ["run", _model(ws, model), "--run-dir", str(ws.path("r")),
                                                  "--quiet"])

for case_id, url in [("base-url-broken-ipv6", "http://[::1/v1"), ("base-url-port-99999", "http://h.example:99999/v1"),
                     ("base-url-space", "http://h.example /v1"), ("base-url-port-word", "http://h.example:abc/v1")]:
    bad(case_id, "model.base_url")(
        lambda ws, url=url: ["validate", _model(ws, f"{{backend: openai, base_url: '{url}'}}")])


def _dataset_line(ws: Workspace, line: str) -> list[str]:
    ws.text("q.jsonl", line + "\n")
    return ["validate", ws.with_dataset("{source: jsonl, path: q.jsonl}")]


_Q = json.dumps(QUESTION)[1:-1]  # the record's members, to add one before or after
for case_id, line, expect in [
    ("data-lone-surrogate-question", _Q.replace('"Which?"', '"Which \\ud800?"'), "question"),
    ("data-lone-surrogate-qid", _Q.replace('"q1"', '"q\\udc00"'), "realidx"),
    ("data-lone-surrogate-option", _Q.replace('"x"', '"\\ud800"'), "options.A"),
    ("data-realidx-5000-digits", _Q.replace('"q1"', "1" * 5000), "q.jsonl:1"),
    ("data-realidx-600-chars", _Q.replace('"q1"', '"' + "q" * 600 + '"'), "realidx"),
    ("data-nul-in-qid", _Q.replace('"q1"', '"q\\u0000"'), "realidx"),
    ("data-nested-200000", _Q + ', "extra": ' + "[" * 200_000 + "]" * 200_000, "q.jsonl:1"),
]:
    bad(case_id, expect)(lambda ws, line=line: _dataset_line(ws, "{" + line + "}"))

for case_id, change, expect in [
    ("number-timeout-inf", ("backend: scripted", "backend: scripted, timeout_s: .inf"), "model.timeout_s"),
    ("number-timeout-nan", ("backend: scripted", "backend: scripted, timeout_s: .nan"), "model.timeout_s"),
    ("number-seed-huge", ("backend: scripted", "backend: scripted, seed: 1.2e29"), "model.seed"),
    ("number-seed-1.2e+29", ("backend: scripted", "backend: scripted, seed: 1.2e+29"), "model.seed"),
    ("number-seed-float", ("backend: scripted", "backend: scripted, seed: 4.5"), "model.seed"),
    ("number-repeats-50m", ("run: {workers: 1}", "run: {workers: 1, repeats: 50000000}"), "run.repeats"),
    ("number-grace-inf", ("run: {workers: 1}", "run: {workers: 1, interrupt_grace_s: .inf}"), "run.interrupt_grace_s"),
    ("number-claim-timeout-inf", ("run: {workers: 1}", "run: {workers: 1, claim_timeout_s: .inf}"),
     "run.claim_timeout_s"),
    ("number-dataset-seed-huge", ("limit: 1", "limit: 1, seed: 1.2e29"), "dataset.seed"),
    ("number-max-retries-huge", ("backend: scripted", "backend: scripted, max_retries: 1000000"), "model.max_retries"),
]:
    bad(case_id, expect)(lambda ws, change=change: ["validate", ws.scenario(GOOD.replace(*change))])
bad("override-rpm-inf", "--rpm")(lambda ws: ["run", ws.scenario(), "--rpm", "inf", "--run-dir", str(ws.path("r"))])
bad("override-max-cost-inf", "--max-cost-usd")(lambda ws: ["run", ws.scenario(), "--max-cost-usd", "inf"])
bad("pipeline-os-system", "pipeline")(
    lambda ws: ["validate", ws.scenario(GOOD.replace("pipeline: generalist", 'pipeline: "os:system"'))])
bad("pipeline-a-function", "pipeline")(
    lambda ws: ["validate", ws.scenario(GOOD.replace("pipeline: generalist", 'pipeline: "json:dumps"'))])


def test_a_missing_key_leaves_no_run_directory(ws: Workspace) -> None:
    argv = ["run", _model(ws, f"{{backend: openai, name: m, {NO_KEY}}}"), "--run-dir", str(ws.path("r")), "--quiet"]
    check_refused(invoke(argv), "MEDPANEL_PROBE_NO_KEY", argv)
    assert not ws.path("r").exists()


# -- accepted silently ------------------------------------------------------------------------------

for case_id, line, expect in [
    ("data-duplicate-options", _Q + ', "options": {"A": "p", "B": "q"}', "options"),
    ("data-duplicate-realidx", _Q + ', "realidx": "q2"', "realidx"),
    ("data-duplicate-answer", _Q + ', "answer_idx": "B"', "answer_idx"),
    ("data-duplicate-option-letter", _Q.replace('"B": "y"', '"B": "y", "B": "z"'), "'B'"),
    ("data-empty-option", _Q.replace('"B": "y"', '"B": "  "'), "options.B"),
]:
    bad(case_id, expect)(lambda ws, line=line: _dataset_line(ws, "{" + line + "}"))
bad("yaml-limit-true", "dataset.limit")(lambda ws: ["validate", ws.scenario(GOOD.replace("limit: 1", "limit: true"))])


def _future_format(ws: Workspace) -> str:
    run = ws.run()
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "format_version": 99}))
    return str(run)


bad("run-json-format-99-resume", "format 99")(lambda ws: ["run", "--resume", _future_format(ws), "--quiet"])
bad("run-json-format-99-report", "format 99")(lambda ws: ["report", _future_format(ws)])


def test_report_html_warns_of_a_condition_without_transcripts(ws: Workspace) -> None:
    run = ws.run()
    condition = load_run(run).rows[0].condition
    for row in load_run(run).rows:
        if row.condition == condition:
            remove(transcript_path(run, row))
    res = invoke(["report", str(run), "--html"])
    assert res.rc == 0, res.err + res.tb
    warning = [line for line in res.err.splitlines() if line.startswith("warning:")]
    assert len(warning) == 1 and f"condition {condition}:" in warning[0] and "missing" in warning[0], res.err
    assert "warning" not in invoke(["report", str(ws.run("intact")), "--html"]).err


# -- misleading messages ----------------------------------------------------------------------------

def test_bare_cache_off_means_off(ws: Workspace) -> None:
    res = invoke(["run", ws.scenario(GOOD.replace("backend: scripted", "backend: scripted, cache: off")),
                  "--run-dir", str(ws.path("r")), "--quiet"])
    assert res.rc == 0, res.err + res.tb
    assert json.loads((ws.path("r") / "run.json").read_text())["model"]["cache"] == "off"
    assert not (ws.path("r") / "cache").exists()


@pytest.fixture
def read_only_run(ws: Workspace) -> Iterator[Path]:
    """A copy of the run on a filesystem mounted read-only (needs root's mount; skipped elsewhere)."""
    mount = ws.path("ro")
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mount)], capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        # A run made there, as a run is left: its study's WAL journal beside it. In a process of its
        # own, so no handle of this one keeps a file open for writing (remount would be refused).
        made = subprocess.run([sys.executable, "-m", "medpanel", "run", ws.scenario(), "--run-dir",
                               str(mount / "run"), "--quiet"], capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stdout + made.stderr
        ro = subprocess.run(["mount", "-o", "remount,ro", str(mount)], capture_output=True, text=True)
        if ro.returncode != 0:
            pytest.skip(f"this machine refuses a read-only remount: {ro.stderr.strip()}")
        yield mount / "run"
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)  # lazy: a handle may still be open


@pytest.mark.parametrize("command", ["resume", "report", "export", "show"])
def test_a_read_only_run_is_said_to_be_read_only(command: str, read_only_run: Path) -> None:
    run = str(read_only_run)
    argv = {"resume": ["run", "--resume", run, "--quiet"], "report": ["report", run],
            "export": ["export", run, "--out", "-"], "show": ["show", run, "any-qid"]}[command]
    res = invoke(argv)
    check_refused(res, "read-only", argv)
    assert "damaged" not in res.err and "backup" not in res.err


# -- security ---------------------------------------------------------------------------------------

URL_SECRET, USER_SECRET = "qq-url-secret-4711", "pw-user-secret-0815"


def _secret_url_run(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    monkeypatch.setenv("MEDPANEL_PROBE_QKEY", URL_SECRET)
    monkeypatch.setenv("MEDPANEL_PROBE_PW", USER_SECRET)
    url = "https://user:${MEDPANEL_PROBE_PW}@h.example/v1?deployment=x&key=${MEDPANEL_PROBE_QKEY}"
    scenario = _model(ws, f"{{backend: scripted, base_url: '{url}'}}")
    run = ws.path("secret-run")
    res = invoke(["run", scenario, "--run-dir", str(run), "--quiet"])
    assert res.rc == 0, res.err + res.tb
    return run, scenario


def test_url_credentials_are_written_nowhere(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = _secret_url_run(ws, monkeypatch)
    assert invoke(["report", str(run), "--html"]).rc == 0
    assert invoke(["export", str(run)]).rc == 0
    with sqlite3.connect(run / "study.db") as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    files = [p for p in run.rglob("*") if p.is_file()]
    assert any(p.name == "index.html" for p in files)
    leaks = [str(p) for p in files if URL_SECRET.encode() in p.read_bytes() or USER_SECRET.encode() in p.read_bytes()]
    assert not leaks, leaks
    recorded = json.loads((run / "run.json").read_text())["model"]["base_url"]
    assert "deployment=x" in recorded and "h.example" in recorded  # masked, not dropped


def test_a_run_with_url_credentials_resumes_from_its_scenario(ws: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    run, scenario = _secret_url_run(ws, monkeypatch)
    _drop_one_row(run)
    res = invoke(["run", "--resume", str(run), "--quiet"])
    assert res.rc == 0, res.err + res.tb
    _drop_one_row(run)
    Path(scenario).unlink()
    argv = ["run", "--resume", str(run), "--quiet"]
    check_refused(invoke(argv), "credentials", argv)


bad("prompt-file-outside-the-project", "prompts_root")(
    lambda ws: ["validate", ws.scenario(GOOD + "prompts: {generalist: /etc/passwd}\n")])
bad("prompt-file-dotdot-outside", "prompts.generalist")(
    lambda ws: ["validate", ws.scenario(GOOD + "prompts: {generalist: ../../../../../../etc/hostname}\n")])
bad("prompt-file-binary", "p.md")(
    lambda ws: [ws.bytes("p.md", bytes(range(256))), "validate",
                ws.scenario(GOOD + "prompts: {generalist: p.md}\n")][1:])


def test_prompts_root_opts_in_to_a_folder_elsewhere(ws: Workspace, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("shared-prompts")
    original = (Path(__file__).parents[1] / "methods").rglob("generalist.system.md")  # the panel room's roles
    (elsewhere / "g.md").write_text(next(original).read_text())
    body = GOOD + f"prompts: {{generalist: {elsewhere / 'g.md'}}}\n"
    argv = ["validate", ws.scenario(body)]
    check_refused(invoke(argv), "prompts_root", argv)
    res = invoke(["validate", ws.scenario(body + f"prompts_root: {elsewhere}\n")])
    assert res.rc == 0, res.err + res.tb


@pytest.mark.parametrize("where", ["/etc/hostname", "../outside.json"])
def test_the_api_refuses_a_transcript_path_out_of_the_run(where: str, ws: Workspace) -> None:
    import medpanel
    from medpanel.experiments.errors import UserError

    run = ws.run()
    ws.path("outside.json").write_bytes(_first_transcript(run).read_bytes())  # a valid transcript, just not the run's
    with sqlite3.connect(run / "study.db") as conn:
        conn.execute("update mp_results set transcript = ?", (where,))
    loaded = medpanel.load_run(run)
    with pytest.raises(UserError, match="leaves the run directory"):
        list(loaded.transcripts())
    with pytest.raises(UserError, match="leaves the run directory"):
        loaded.transcript(loaded.rows[0])


def test_show_prints_escape_sequences_escaped(ws: Workspace) -> None:
    run = ws.run()
    path = _first_transcript(run)
    doc = json.loads(path.read_text())
    doc["question"]["text"] = "Which?\x1b]0;pwned\x07\x1b[2J"
    doc["question"]["options"]["A"] = "\x1b[31mred\x9b0m"
    for e in doc["events"]:
        e["content"] = "\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\"
    rewrite(run, path, doc)
    res = invoke(["show", str(run), doc["question"]["qid"], "--condition", doc["condition"], "--full"])
    assert res.rc == 0, res.err + res.tb
    assert "\x1b" not in res.out and "\x9b" not in res.out and "\x07" not in res.out
    assert "\\x1b]0;pwned" in res.out  # shown, escaped


def test_view_refuses_a_foreign_host_header(tmp_path: Path) -> None:
    import http.client
    import threading

    from medpanel.experiments.view.viewer import make_server

    (tmp_path / "index.html").write_text("<p>report</p>")
    server = make_server(tmp_path, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]

    def get(host: str, method: str = "GET") -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.putrequest(method, "/index.html", skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        status = conn.getresponse().status
        conn.close()
        return status

    try:
        assert get(f"127.0.0.1:{port}") == 200 and get(f"localhost:{port}") == 200
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", ""):
            assert get(host) == 403, host
        assert get("evil.example", "HEAD") == 403
    finally:
        server.shutdown()
        server.server_close()


# -- the probe --------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", BAD, ids=[c.id for c in BAD])
def test_second_probe_bad_input_is_one_line_exit_2(case: Case, ws: Workspace) -> None:
    argv = case.build(ws)

    def too_long(signum: int, frame: object) -> None:
        raise TimeoutError(f"{argv} still waiting after 60 s")

    old = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(60)  # a blocked open() is interrupted, so a case that would wait forever fails instead
    try:
        res = invoke(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    check_refused(res, case.expect, argv)


def test_second_probe_ids_are_unique() -> None:
    assert len({c.id for c in BAD}) == len(BAD)
