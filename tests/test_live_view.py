"""`medpanel view` on a run that is running: a real run in a subprocess (the scripted model, slowed),
the real `view` command in another, and the page in Chromium driven by Playwright.

The page must show new pairs without a reload, open a finished debate's question page while the
run goes on, and turn into the finished report, whose tables are those `medpanel report --html`
writes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from medpanel.experiments.run.store.rundir import load_record
from medpanel.experiments.view.live import LiveRun, alerts, condition_view, leave_no_wal

from .conftest import needs_postgres
from .inspect_fixtures import GRID_QUESTIONS, grid_run

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]
WAIT_MS = 120_000
NO_CHROMIUM = pytest.mark.skipif(not CHROMIUM.exists(),
                                 reason=f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
NO_PLAYWRIGHT = pytest.mark.skipif(importlib.util.find_spec("playwright") is None,
                                   reason="the playwright package is not installed (the [dev] extra; no browser "
                                          "download: the test drives the system Chromium)")
SCENARIO = """name: livewatch
pipeline: panel
flags: {c: [0, 1], r: [0, 1]}
dataset: {source: sample, subsets: [medqa-style], limit: 3}
model: {backend: scripted, latency_ms: LATENCY}
run: {workers: 1, prices: {scripted: {input: 1.0, output: 2.0}}}
"""


def _medpanel(*args: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "medpanel", *args], text=True, **kw)


def _wait(what: str, check: Any, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A 12-pair scripted panel run, slowed to a few seconds a pair, running in a subprocess."""
    scenario = tmp_path / "live.yaml"
    scenario.write_text(SCENARIO.replace("LATENCY", "120"), encoding="utf-8")
    run_dir = tmp_path / "run"
    log = open(tmp_path / "run.log", "w", encoding="utf-8")
    proc = _medpanel("run", str(scenario), "--run-dir", str(run_dir), "--quiet", stdout=log, stderr=log)
    try:
        _wait("the run to start", lambda: (run_dir / "run.json").is_file() and (run_dir / "study.db").is_file())
        yield run_dir, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
        log.close()


def _serve(run_dir: Path, log: Path) -> tuple[subprocess.Popen[str], str]:
    out = open(log, "w", encoding="utf-8")
    proc = _medpanel("view", str(run_dir), "--port", "0", "--poll-s", "0.5", stdout=out, stderr=subprocess.STDOUT)
    m = _wait("view's URL", lambda: re.search(r"(http://127\.0\.0\.1:\d+)/index\.html", log.read_text("utf-8")))
    return proc, m.group(1)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@NO_CHROMIUM
@NO_PLAYWRIGHT
def test_live_page_follows_a_run_and_becomes_its_report(running: tuple[Path, subprocess.Popen[str]],
                                                        tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    run_dir, run = running
    view, base = _serve(run_dir, tmp_path / "view.log")
    shot = Path(os.environ.get("MEDPANEL_LIVE_SCREENSHOT") or tmp_path / "live.png")
    try:
        assert "live view" in (tmp_path / "view.log").read_text("utf-8")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
            page = browser.new_page(viewport={"width": 1280, "height": 1100})
            page.goto(f"{base}/index.html")
            page.wait_for_function("() => /^\\d+ of 12 pairs done/.test(document.getElementById('progress')"
                                   ".textContent) && document.querySelectorAll('#latest tr.pair').length > 0",
                                   timeout=WAIT_MS)
            first = int(page.text_content("#progress").split()[0])
            assert first < 12, "the run finished before the page could watch it: slow it down"
            page.evaluate("() => { window.__same_page = true; }")  # gone if the page is reloaded
            page.wait_for_function(f"() => parseInt(document.getElementById('progress').textContent) > {first}",
                                   timeout=WAIT_MS)
            assert page.evaluate("() => window.__same_page === true"), "the page was reloaded to update"
            later = int(page.text_content("#progress").split()[0])
            rows = page.locator("#conditions tbody tr")
            assert rows.count() == 4
            assert [rows.nth(i).get_attribute("data-condition") for i in range(4)] == ["c0r0", "c0r1", "c1r0", "c1r1"]
            assert "projected total $" in page.text_content("#cost")
            assert re.search(r"\d+ calls \(projected \d+\)", page.text_content("#calls"))
            done_cells = [int(rows.nth(i).locator("td").nth(1).text_content() or "0") for i in range(4)]
            assert sum(done_cells) >= later
            page.screenshot(path=str(shot), full_page=True)
            assert run.poll() is None, "the screenshot must show a run in progress"
            assert not (run_dir / "report").exists(), "the live view wrote into the running run"

            # A finished debate opens in its question page while the run goes on.
            link = page.locator("#latest tr.pair a").first
            qid = (link.text_content() or "").split("/", 1)[1]
            link.click()
            page.wait_for_selector(".ev", timeout=WAIT_MS)
            assert qid in page.title()
            page.go_back()

            # The run ends; the page turns into the finished report on its own.
            assert run.wait(timeout=600) == 0
            page.wait_for_selector("#qtable", timeout=WAIT_MS)
            assert page.locator("#live").count() == 0
            shown = page.eval_on_selector_all("table.data", "ts => ts.map(t => t.innerText)")
            n_rows = page.locator("#qtable tbody tr").count()
            browser.close()
        assert n_rows == 12

        # `medpanel report --html` writes the same tables.
        before = _digest(run_dir / "study.db")
        done = subprocess.run([sys.executable, "-m", "medpanel", "report", str(run_dir), "--html"],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert _digest(run_dir / "study.db") == before
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)
            page = browser.new_page()
            page.goto(f"{base}/index.html")
            page.wait_for_selector("#qtable")
            again = page.eval_on_selector_all("table.data", "ts => ts.map(t => t.innerText)")
            browser.close()
        assert shown == again
    finally:
        view.terminate()
        view.wait(timeout=30)
    assert "Traceback" not in (tmp_path / "view.log").read_text("utf-8")


# -- the figures, without a browser -----------------------------------------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return grid_run(tmp_path_factory.mktemp("live"), questions=GRID_QUESTIONS[:3], name="livegrid")


def test_live_figures_match_the_rows_and_write_nothing(finished: Path) -> None:
    before = {p.name: _digest(p) for p in finished.iterdir() if p.is_file()}
    live = LiveRun(finished, load_record(finished))
    try:
        doc = live.snapshot()
        assert doc["done"] == 12 and doc["total"] == 12 and not doc["running"]
        by = {c["condition"]: c for c in doc["conditions"]}
        assert set(by) == {"c0r0", "c0r1", "c1r0", "c1r1"}
        assert all(c["done"] == 3 for c in by.values())
        assert sum(c["calls"] for c in by.values()) == doc["calls"] > 0
        for c in by.values():
            lo, hi = c["ci"]
            assert lo <= c["accuracy"] <= hi
        assert len(doc["latest"]) == 12 and doc["latest"][0]["page"].startswith("questions/")
        html = live.question(doc["latest"][0]["page"].removeprefix("questions/"))
        assert html is not None and 'class="ev ' in html
        assert live.question("nothing.html") is None
    finally:
        live.close()
    after = {p.name: _digest(p) for p in finished.iterdir() if p.is_file()}
    # The read-only connection's WAL and shared-memory files are gone too: the run is left as found.
    assert after == before and not (finished / "report").exists()


def test_live_page_of_a_question_is_the_reports_page(finished: Path, tmp_path: Path) -> None:
    """Built on demand during the run, a question page holds what the finished report's holds."""
    copy = tmp_path / "copy"
    shutil.copytree(finished, copy)
    live = LiveRun(copy, load_record(copy))
    try:
        name = live.snapshot()["latest"][0]["page"].removeprefix("questions/")
        html = live.question(name) or ""
    finally:
        live.close()
    from medpanel.experiments.view.viewer import build_site

    build_site(copy, plots=False, n_boot=200)
    built = (copy / "report" / "questions" / name).read_text("utf-8")

    def strip(t: str) -> str:
        return re.sub(r"nonce-[^'\"]+|nonce=\"[^\"]+\"", "", t)

    assert strip(html) == strip(built)


def _cond(name: str, **kw: Any) -> dict[str, Any]:
    base = {"condition": name, "scored": 10, "invalid": 0, "recruit_rate": 0.5, "retrieval_rate": None,
            "flags": {}}
    return {**base, **kw}


@pytest.mark.parametrize(("cond", "errors", "limit", "expect"), [
    (_cond("c0r0", invalid=10), 0, 10, "every one of 10 replies was unparsed"),
    (_cond("c0r0", invalid=9), 0, 10, None),
    (_cond("c0r0", invalid=4, scored=4), 0, 10, None),  # too few to call it broken
    (_cond("c1r1", recruit_rate=0.0, flags={"c": 1, "r": 1}), 0, 10, "no recruitment in 10 debates"),
    (_cond("c1r0", recruit_rate=0.0, flags={"c": 1, "r": 0}), 0, 10, None),
    (_cond("c0r0k1", retrieval_rate=0.0, flags={"k": 1}), 0, 10, "no passage retrieved"),
    (_cond("c0r0"), 11, 10, "11 error rows, above the run's limit of 10"),
    (_cond("c0r0"), 10, 10, None),
    (_cond("c0r0"), 500, None, None),
])
def test_alerts_name_the_broken_rate(cond: dict[str, Any], errors: int, limit: int | None, expect: str | None) -> None:
    found = alerts([cond], errors, limit)
    if expect is None:
        assert found == []
    else:
        assert len(found) == 1 and expect in found[0]


def test_condition_view_counts_invalid_errors_recruits_and_retrievals(finished: Path) -> None:
    live = LiveRun(finished, load_record(finished))
    try:
        rows = [r for r in live.rows() if r.condition == "c1r1"]
    finally:
        live.close()
    v = condition_view("c1r1", rows, {"c": 1, "r": 1})
    assert v["done"] == len(rows) == 3
    assert v["correct"] == sum(r.correct for r in rows if not r.error)
    assert v["recruit_rate"] == sum(1 for r in rows if (r.summary.get("recruited") or 0)) / 3


# -- while a run runs: --processes and PostgreSQL workers ---------------------------------------------


def _watch(run_dir: Path, procs: list[subprocess.Popen[str]]) -> list[dict[str, Any]]:
    """Snapshots of the live figures taken while `procs` run, then one after they end."""
    _wait("run.json", lambda: (run_dir / "run.json").is_file())
    live = LiveRun(run_dir, load_record(run_dir))
    seen = []
    try:
        _wait("the first rows", lambda: live.snapshot()["done"] > 0)
        while any(p.poll() is None for p in procs):
            seen.append(live.snapshot())
            time.sleep(1.1)
        for p in procs:
            assert p.wait(timeout=600) == 0, p.stdout.read() if p.stdout else ""
        time.sleep(FRESH_WAIT)
        seen.append(live.snapshot())
    finally:
        live.close()
    return seen


FRESH_WAIT = 1.2  # past the snapshot's one-second reuse


def _check_watched(seen: list[dict[str, Any]]) -> None:
    during = [s for s in seen[:-1] if s["running"]]
    assert during, "no snapshot saw the run running"
    done = [s["done"] for s in seen]
    assert done == sorted(done), "pairs done went backwards"
    assert any(s["done"] < s["total"] for s in during) and done[-1] == seen[-1]["total"] == 12
    assert not seen[-1]["running"]
    assert sum(c["done"] for c in seen[-1]["conditions"]) == 12


def test_live_figures_follow_a_run_with_processes(tmp_path: Path) -> None:
    scenario = tmp_path / "live.yaml"
    scenario.write_text(SCENARIO.replace("LATENCY", "60").replace("workers: 1", "workers: 1, processes: 2"),
                        encoding="utf-8")
    run_dir = tmp_path / "run"
    run = _medpanel("run", str(scenario), "--run-dir", str(run_dir), "--quiet", stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT)
    _check_watched(_watch(run_dir, [run]))


@needs_postgres
def test_live_figures_follow_postgresql_workers(tmp_path: Path, pg_url: str) -> None:
    scenario = tmp_path / "live.yaml"
    scenario.write_text(SCENARIO.replace("LATENCY", "60"), encoding="utf-8")
    run_dir = tmp_path / "run"
    run = _medpanel("run", str(scenario), "--storage", pg_url, "--run-dir", str(run_dir), "--quiet",
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    _wait("run.json", lambda: (run_dir / "run.json").is_file())
    worker = _medpanel("worker", pg_url, "--run-dir", str(tmp_path / "elsewhere"), "--quiet",
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = _watch(run_dir, [run, worker])
    _check_watched(seen)


def _wal_study(folder: Path) -> sqlite3.Connection:
    folder.mkdir()
    conn = sqlite3.connect(folder / "study.db")
    conn.execute("pragma journal_mode=wal")
    conn.execute("pragma wal_autocheckpoint=0")  # the rows stay in the WAL until a checkpoint
    conn.execute("create table t (x)")
    conn.execute("insert into t values (1)")
    conn.commit()
    return conn


def test_leaving_the_wal_spares_a_writer_and_a_dead_writers_pages(tmp_path: Path) -> None:
    writer = _wal_study(tmp_path / "live")
    db = tmp_path / "live" / "study.db"
    # A writer still holds the study: its files stay and it goes on writing.
    writer.execute("pragma wal_checkpoint(truncate)")  # an empty WAL, as a runner's between commits
    leave_no_wal(db)
    assert (tmp_path / "live" / "study.db-wal").exists()
    writer.execute("insert into t values (2)")
    writer.commit()
    # A writer that died with rows in its WAL: the files are copied as it left them, and kept.
    shutil.copytree(tmp_path / "live", tmp_path / "dead")
    writer.close()
    wal = tmp_path / "dead" / "study.db-wal"
    before = wal.read_bytes()
    assert before
    leave_no_wal(tmp_path / "dead" / "study.db")
    assert wal.read_bytes() == before
    # After the last writer closed cleanly, a read-only reader's empty files go.
    reader = sqlite3.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
    assert reader.execute("select count(*) from t").fetchone() == (2,)
    reader.close()
    assert (tmp_path / "live" / "study.db-wal").exists()
    leave_no_wal(db)
    assert not (tmp_path / "live" / "study.db-wal").exists() and not (tmp_path / "live" / "study.db-shm").exists()
