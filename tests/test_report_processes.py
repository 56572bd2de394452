"""`medpanel report` and `report --html` spread over forked processes: the same tables, digests, pages and
files as one process, the same one-line error for the first damaged transcript, missing transcripts counted,
old question pages removed, and one process when asked for (`--processes 1`) or when the run is small."""

from __future__ import annotations

import itertools
import os
import pickle
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from medpanel.experiments.analysis import fanout
from medpanel.experiments.analysis.report import read_run_tables
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.rundir import load_run
from medpanel.experiments.run.store.transcript_log import RecordPath, record_path
from medpanel.experiments.view.viewer import build_report_site
from tests.rundir_helpers import completed

from .cli_helpers import run_main

SCENARIO = {"name": "procs", "pipeline": "panel", "flags": {"c": [0, 1], "r": [0, 1]},
            "dataset": {"source": "sample"}, "settings": {"rounds": 1, "turns_per_round": 2},
            "model": {"backend": "scripted"}, "run": {"workers": 2}}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("procs")
    return completed(SCENARIO, tmp).run_dir


def copy_run(run_dir: Path, dest: Path) -> Path:
    shutil.copytree(run_dir, dest, ignore=shutil.ignore_patterns("report", "runner.lock"))
    return dest


def counting_forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """os.fork counted in this process (a child's own forks are not)."""
    forks: list[int] = []
    real = os.fork

    def fork() -> int:
        pid = real()
        if pid:
            forks.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return forks


def damage(run_dir: Path, index: int) -> str:
    """Break the JSON of row `index`'s transcript record (its first key's quote), keeping its length and
    its line, so it is there but not a transcript; how the error names it (the file and the record's byte)."""
    row = load_run(run_dir).rows[index]
    path = record_path(run_dir, row.transcript)
    assert isinstance(path, RecordPath)
    with open(path, "r+b") as fh:
        fh.seek(path.offset + 1)
        assert fh.read(1) == b'"'
        fh.seek(path.offset + 1)
        fh.write(b"#")
    return f"{path}: the record at byte {path.offset} "


def remove(run_dir: Path, index: int) -> None:
    """Row `index`'s record no longer where its row says (its first byte blanked): a missing transcript."""
    row = load_run(run_dir).rows[index]
    path = record_path(run_dir, row.transcript)
    assert isinstance(path, RecordPath)
    with open(path, "r+b") as fh:
        fh.seek(path.offset)
        fh.write(b" ")


def site_files(run_dir: Path) -> dict[str, bytes]:
    """Every file of report/, each HTML page's random script nonce masked."""
    out = {}
    for p in sorted((run_dir / "report").rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if p.suffix == ".html":
                data = re.sub(rb"nonce([-=]\"?)[A-Za-z0-9_-]+", rb"nonce\1X", data)
            out[str(p.relative_to(run_dir))] = data
    return out


def test_the_run_is_split_into_several_chunks(run_dir: Path) -> None:
    rows = load_run(run_dir).rows
    assert len(rows) == 48
    bounds = fanout.chunk_bounds(len(rows), 3)
    assert len(bounds) > 3 and bounds[0][0] == 0 and bounds[-1][1] == 48
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))


COUNTING_FORKS = """
import os, pickle, sys
from pathlib import Path
forks = []
real = os.fork
def fork():
    pid = real()
    if pid:
        forks.append(pid)
    return pid
os.fork = fork
"""


def fresh(code: str) -> None:
    """`code` run by a fresh interpreter: no thread another test left alive, so the report forks
    (beside a thread it reads in one process: `test_one_process_beside_another_thread`)."""
    subprocess.run([sys.executable, "-c", COUNTING_FORKS + code], check=True, timeout=600)


def test_tables_and_digests_in_several_processes_are_one_process_s(run_dir: Path, tmp_path: Path) -> None:
    data = load_run(run_dir)
    one = read_run_tables(run_dir, data.rows, data.record, processes=1)
    out = tmp_path / "many.pickle"
    fresh(f"""
from medpanel.experiments.analysis.report import read_run_tables
from medpanel.experiments.run.store.rundir import load_run
data = load_run(Path({str(run_dir)!r}))
many = read_run_tables(data.run_dir, data.rows, data.record, processes=3)
Path({str(out)!r}).write_bytes(pickle.dumps((len(forks), many.digests, [t.csv() for t in many.tables])))
""")
    forks, digests, tables = pickle.loads(out.read_bytes())
    assert forks == 2  # the readers
    assert digests == one.digests
    assert [d.row for d in digests] == data.rows
    assert tables == [t.csv() for t in one.tables]


def test_one_process_beside_another_thread(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forks = counting_forks(monkeypatch)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        data = load_run(run_dir)
        many = read_run_tables(run_dir, data.rows, data.record, processes=3)
    finally:
        stop.set()
        other.join()
    assert forks == []
    assert many.digests == read_run_tables(run_dir, data.rows, data.record, processes=1).digests


def test_the_cli_report_in_several_processes_prints_and_writes_the_same(run_dir: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    a, b = copy_run(run_dir, tmp_path / "a" / "run"), copy_run(run_dir, tmp_path / "b" / "run")
    code_a, out_a, _err_a = run_main(capsys, "report", str(a), "--processes", "1")
    code_b, out_b, _err_b = run_main(capsys, "report", str(b), "--processes", "3")
    assert (code_a, code_b) == (0, 0)
    assert out_a.replace(str(a), "RUN") == out_b.replace(str(b), "RUN")
    assert site_files(a) == site_files(b)


@pytest.mark.parametrize("processes", [2, 3])
def test_the_first_damaged_transcript_in_row_order_is_the_same_one_line_error(
        run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], processes: int) -> None:
    errors = []
    for n in (1, processes):
        run = copy_run(run_dir, tmp_path / f"p{n}" / "run")
        first = damage(run, 21)
        damage(run, 40)  # a later chunk's: never the one named
        with pytest.raises(UserError) as raised:
            read_run_tables(run, load_run(run).rows, load_run(run).record, processes=n)
        assert str(raised.value).startswith(first)
        code, _out, err = run_main(capsys, "report", str(run), "--processes", str(n))
        assert code == 2 and "Traceback" not in err
        errors.append((str(raised.value).replace(str(run), "RUN"), err.replace(str(run), "RUN")))
    assert errors[0] == errors[1]
    assert len(errors[0][1].strip().splitlines()) == 1


def test_a_damaged_transcript_in_the_parent_s_own_chunk_and_a_worker_s_give_the_first(
        run_dir: Path, tmp_path: Path) -> None:
    run = copy_run(run_dir, tmp_path / "run")
    last = damage(run, 47)
    first = damage(run, 0)
    with pytest.raises(UserError) as raised:
        read_run_tables(run, load_run(run).rows, load_run(run).record, processes=2)
    assert str(raised.value).startswith(first) and not str(raised.value).startswith(last)


def test_missing_transcripts_are_counted_in_several_processes(run_dir: Path, tmp_path: Path) -> None:
    run = copy_run(run_dir, tmp_path / "run")
    for i in (3, 30, 47):
        remove(run, i)
    data = load_run(run)
    one = read_run_tables(run, data.rows, data.record, processes=1)
    many = read_run_tables(run, data.rows, data.record, processes=3)
    assert [i for i, d in enumerate(many.digests) if d.missing] == [3, 30, 47]
    assert many.digests == one.digests
    assert [t.csv() for t in many.tables] == [t.csv() for t in one.tables]


def test_the_site_in_several_processes_is_one_process_s(run_dir: Path, tmp_path: Path) -> None:
    a, b = copy_run(run_dir, tmp_path / "a" / "run"), copy_run(run_dir, tmp_path / "b" / "run")
    _, one = build_report_site(a, processes=1)
    out = tmp_path / "many.pickle"
    fresh(f"""
from medpanel.experiments.view.viewer import build_report_site
_, many = build_report_site(Path({str(b)!r}), processes=3)
Path({str(out)!r}).write_bytes(pickle.dumps((len(forks), many.digests, [t.csv() for t in many.tables])))
""")
    forks, digests, tables = pickle.loads(out.read_bytes())
    assert forks == 3  # two page workers, then the transition figures beside the tables and the index
    assert one is not None
    assert digests == one.digests
    assert tables == [t.csv() for t in one.tables]
    files = site_files(a)
    assert len([f for f in files if f.startswith("report/questions/")]) == 12
    assert any(f.endswith(".png") for f in files) and any(f.endswith(".svg") for f in files)
    assert site_files(b) == files


@pytest.mark.parametrize("processes", [1, 3])
def test_old_pages_are_removed_also_when_a_damaged_transcript_stops_the_site(
        run_dir: Path, tmp_path: Path, processes: int) -> None:
    results: dict[int, tuple[str, set[str]]] = {}
    for n in sorted({1, processes}):
        run = copy_run(run_dir, tmp_path / f"p{n}" / "run")
        build_report_site(run, processes=1)  # every page there, as a previous build left them
        questions = run / "report" / "questions"
        (questions / "gone__question.html").write_text("old", encoding="utf-8")
        rows = load_run(run).rows
        ninth = sorted({r.key for r in rows})[8]  # the pages are written in the questions' order
        damage(run, next(i for i, r in enumerate(rows) if r.key == ninth))
        with pytest.raises(UserError) as raised:
            build_report_site(run, processes=n)
        results[n] = (str(raised.value).replace(str(run), "RUN"), {p.name for p in questions.glob("*.html")})
    assert results[1] == results[processes]
    _error, pages = results[1]
    assert "gone__question.html" not in pages and len(pages) == 8
    assert not [p for p in (tmp_path / f"p{processes}" / "run" / "report" / "questions").iterdir()
                if p.name.endswith(".tmp")]


def test_one_process_when_asked_for_or_when_the_run_is_small(run_dir: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    def no_fork() -> int:
        raise AssertionError("forked")

    monkeypatch.setattr(os, "fork", no_fork)
    run = copy_run(run_dir, tmp_path / "run")
    code, _out, err = run_main(capsys, "report", str(run), "--processes", "1", "--html")
    assert code == 0, err
    data = load_run(run)
    read_run_tables(run, data.rows, data.record)  # 48 rows: below what forking pays for
    assert fanout.process_count(None, 48) == 1


def test_the_process_count_follows_the_cpus_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    cpus: Callable[[int], set[int]] = lambda _pid: set(range(64))  # noqa: E731
    monkeypatch.setattr(os, "sched_getaffinity", cpus)
    assert fanout.process_count(None, 100_000) == fanout.MAX_PROCESSES
    assert fanout.process_count(None, 3 * fanout.ROWS_PER_PROCESS) == 3
    assert fanout.process_count(None, fanout.ROWS_PER_PROCESS - 1) == 1
    assert fanout.process_count(5, 10) == 5  # asked for: as many
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    assert fanout.process_count(None, 100_000) == 2


def test_a_bad_process_count_is_one_line(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run_main(capsys, "report", str(run_dir), "--processes", "0")
    assert code == 2 and "--processes" in err and "Traceback" not in err


def test_a_worker_that_dies_leaves_its_chunk_to_the_parent() -> None:
    parent = os.getpid()

    def work(i: int) -> fanout.Done[int]:
        if os.getpid() != parent:
            os._exit(9)  # killed on its first chunk, without a word
        return fanout.Done(i * 10)

    out = fanout.fan_out(list(range(6)), work, 2, encode=pickle.dumps, decode=lambda _c, b: pickle.loads(b))
    assert out == [0, 10, 20, 30, 40, 50]


def test_a_worker_s_unexpected_error_is_raised_at_its_place_in_the_order() -> None:
    def work(i: int) -> fanout.Done[int]:
        if i in (3, 5):
            raise ValueError(f"chunk {i}")
        return fanout.Done(i)

    with pytest.raises(ValueError, match="chunk 3"):
        fanout.fan_out(list(range(8)), work, 3, encode=pickle.dumps, decode=lambda _c, b: pickle.loads(b))
    assert fanout.fan_out(list(range(3)), work, 3, encode=pickle.dumps,
                          decode=lambda _c, b: pickle.loads(b)) == [0, 1, 2]
