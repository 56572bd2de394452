"""A file a user names is checked before a byte of it is read: real FIFOs, links to /dev/zero, folders,
sockets, huge and non-UTF-8 files, through the one reader (`medpanel.inputs`) and through every
command that opens a user's file. Each refusal is one line naming the path; nothing hangs (each test
has a timeout, and a FIFO with no writer would block an unchecked open for ever)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from medpanel.experiments.errors import UserError, read_text
from medpanel.inputs import InputFileError, check_input, open_input, read_input, read_input_text

from .cli_helpers import run_main
from .conftest import write

pytestmark = pytest.mark.timeout(120)

SCENARIO = """name: s
pipeline: generalist
flags: {c: [0]}
dataset: {source: sample, limit: 1}
model: {backend: scripted}
run: {workers: 1}
"""


def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _zero(p: Path) -> None:
    os.symlink("/dev/zero", p)


def _null(p: Path) -> None:
    os.symlink("/dev/null", p)


def _folder(p: Path) -> None:
    p.mkdir()


def _latin1(p: Path) -> None:
    p.write_bytes("name: caf\u00e9\n".encode("latin-1"))


def _binary(p: Path) -> None:
    p.write_bytes(b"\x00\x01\x02\xff\xfe" * 100)


def _dangling(p: Path) -> None:
    os.symlink(p.parent / "nowhere", p)


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # A socket's path must be short (108 bytes): not under pytest's long tmp_path.
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mp") as d:
        yield Path(d)


def _socket(p: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()


KINDS: dict[str, tuple[Callable[[Path], None], str]] = {
    "fifo": (_fifo, "named pipe (FIFO)"),
    "dev-zero link": (_zero, "a device"),
    "dev-null link": (_null, "a device"),
    "folder": (_folder, "a folder"),
    "missing": (lambda p: None, "no such"),
    "dangling link": (_dangling, "no such"),
    "latin-1": (_latin1, "not UTF-8 text (byte 0xe9 on line 1)"),
    "binary": (_binary, "a binary file"),
}


def _make(tmp: Path, kind: str, name: str = "x.yaml") -> tuple[Path, str]:
    make, words = KINDS[kind]
    p = tmp / name
    make(p)
    return p, words


# -- the reader itself ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_reader_refuses_each_kind_in_one_line_naming_the_path(tmp_path: Path, kind: str) -> None:
    p, words = _make(tmp_path, kind)
    with pytest.raises(InputFileError) as err:
        read_input_text(p, what="scenario")
    msg = str(err.value)
    assert words in msg and msg.startswith(str(p)) and "\n" not in msg, msg


@pytest.mark.parametrize("kind", ["fifo", "dev-zero link", "dev-null link", "folder"])
def test_open_and_check_refuse_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    p, words = _make(tmp_path, kind)
    for call in (lambda: open_input(p), lambda: check_input(p), lambda: read_input(p)):
        with pytest.raises(InputFileError, match=words.replace("(", r"\(").replace(")", r"\)")):
            call()


def test_a_socket_is_refused(sock_dir: Path) -> None:
    p = sock_dir / "s.yaml"
    _socket(p)
    with pytest.raises(InputFileError, match="is a socket"):
        read_input_text(p)


def test_a_fifo_with_a_writer_waiting_is_refused_too(tmp_path: Path) -> None:
    """A FIFO someone writes into is still not a file: it is refused, its writer left alone."""
    p = tmp_path / "f.yaml"
    os.mkfifo(p)
    writer = subprocess.Popen([sys.executable, "-c", f"open({str(p)!r}, 'w').write('name: x\\n')"])
    try:
        with pytest.raises(InputFileError, match="FIFO"):
            read_input_text(p)
    finally:
        writer.kill()
        writer.wait()


@pytest.mark.parametrize(("size", "bound", "ok"), [(10, 10, True), (11, 10, False), (0, 10, True),
                                                   (1_000_001, 1_000_000, False)])
def test_the_size_bound_is_checked_before_reading(tmp_path: Path, size: int, bound: int, ok: bool) -> None:
    p = tmp_path / "big.txt"
    p.write_bytes(b"a" * size)
    if ok:
        assert len(read_input(p, max_bytes=bound)) == size
    else:
        with pytest.raises(InputFileError, match=f"may have at most {bound:,}"):
            read_input(p, max_bytes=bound)


@pytest.mark.parametrize(("raw", "text"), [(b"\xef\xbb\xbfname: x\n", "name: x\n"), (b"", ""),
                                           ("caf\u00e9 \u2713\n".encode(), "caf\u00e9 \u2713\n")])
def test_utf8_is_read_and_a_byte_order_mark_dropped(tmp_path: Path, raw: bytes, text: str) -> None:
    p = tmp_path / "t.txt"
    p.write_bytes(raw)
    assert read_input_text(p) == text


def test_a_link_to_a_regular_file_is_read(tmp_path: Path) -> None:
    real = write(tmp_path / "real.yaml", "name: x\n")
    os.symlink(real, tmp_path / "link.yaml")
    assert read_input_text(tmp_path / "link.yaml") == "name: x\n"


def test_a_nul_in_the_path_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match="NUL"):
        read_input_text(f"{tmp_path}/a\x00b")


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_experiments_reader_is_the_same_reader_as_a_user_error(tmp_path: Path, kind: str) -> None:
    p, words = _make(tmp_path, kind)
    with pytest.raises(UserError) as err:
        read_text(p, what="scenario", field="dataset.path")
    assert words in str(err.value) and "dataset.path" in str(err.value)


# -- every command that opens a user's file ---------------------------------------------------------


@pytest.mark.parametrize("command", ["validate", "run", "plan"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_scenario_that_is_not_a_file_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch, command: str,
                                                          kind: str) -> None:
    monkeypatch.chdir(tmp_path)
    p, words = _make(tmp_path, kind)
    code, out, err = run_main(capsys, command, str(p))
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and words in err and str(p) in err and "Traceback" not in err, err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero link", "folder", "latin-1"])
def test_a_dataset_file_that_is_not_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       kind: str) -> None:
    data, words = _make(tmp_path, kind, "data.jsonl")
    sc = write(tmp_path / "s.yaml", SCENARIO.replace("{source: sample, limit: 1}",
                                                     f"{{source: jsonl, path: {data.name}}}"))
    code, _, err = run_main(capsys, "validate", str(sc))
    assert code == 2 and words in err and "data.jsonl" in err, err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero link", "latin-1"])
def test_a_hugging_face_file_that_is_not_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            kind: str) -> None:
    data, words = _make(tmp_path, kind, "data.parquet")
    sc = write(tmp_path / "s.yaml", SCENARIO.replace("{source: sample, limit: 1}",
                                                     f"{{source: hf, path: {data.name}, preset: medqa}}"))
    code, _, err = run_main(capsys, "validate", str(sc))
    assert code == 2 and "data.parquet" in err, err
    if kind != "latin-1":  # the parquet reader names that one itself
        assert words in err, err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero link", "folder"])
def test_a_reference_file_that_is_not_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         kind: str) -> None:
    from medpanel.experiments.run.sources.references import _raw

    p, words = _make(tmp_path, kind, "refs.jsonl")
    with pytest.raises(UserError, match=words.split(" (")[0]):
        _raw(p, "references.file")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero link", "latin-1"])
def test_an_exemplar_or_task_file_that_is_not_a_file_is_one_line(tmp_path: Path, kind: str) -> None:
    from medpanel.agents.freetext.tasks import TaskFileError, read_tasks
    from medpanel.agents.plan import PlanError
    from medpanel.agents.roles.exemplars import ExemplarPool

    p, words = _make(tmp_path, kind, "train.jsonl")
    with pytest.raises(TaskFileError, match=words.split(" (")[0]):
        read_tasks(p)
    with pytest.raises(PlanError, match=words.split(" (")[0]):
        ExemplarPool(str(p))


@pytest.mark.parametrize("kind", ["fifo", "dev-zero link", "dev-null link"])
def test_a_corpus_input_that_is_not_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       kind: str) -> None:
    p, words = _make(tmp_path, kind, "docs.jsonl")
    code, _, err = run_main(capsys, "corpus", "ingest", str(p), "--name", "c1", "--no-progress")
    assert code == 2 and words in err and "docs.jsonl" in err, err


def test_the_process_count_lookup_reads_no_special_file(tmp_path: Path) -> None:
    from medpanel.experiments.run.scenario.runspec import planned

    for kind in ("fifo", "dev-zero link", "folder", "latin-1"):
        p, _ = _make(tmp_path, kind, f"{kind}.yaml")
        with pytest.raises(UserError) as err:  # the scenario reader's one line, before any child starts
            planned(p, None, None)
        assert f"{kind}.yaml" in str(err.value)
        run_dir = tmp_path / f"run-{kind}"
        run_dir.mkdir()
        _make(run_dir, kind, "run.json")
        assert planned(None, run_dir, None).run.process_count == 1  # `Runner.open` names it next


def test_medpanel_run_of_a_fifo_scenario_ends_at_once_as_a_subprocess(tmp_path: Path) -> None:
    """The reported hang: the early process-count lookup opened the FIFO and waited for a writer."""
    p = tmp_path / "s.yaml"
    os.mkfifo(p)
    done = subprocess.run([sys.executable, "-m", "medpanel", "run", str(p)], capture_output=True, text=True,
                          timeout=90, cwd=tmp_path)
    assert done.returncode == 2 and "named pipe (FIFO)" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_medpanel_run_of_a_dev_zero_link_ends_at_once_as_a_subprocess(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    os.symlink("/dev/zero", p)
    done = subprocess.run([sys.executable, "-m", "medpanel", "run", str(p), "--processes", "2"],
                          capture_output=True, text=True, timeout=90, cwd=tmp_path)
    assert done.returncode == 2 and "is a device" in done.stderr, done.stderr


# -- scenarios --dir ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
def test_scenarios_dir_lists_a_bad_file_as_one_row_and_the_rest(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               kind: str) -> None:
    if kind in ("missing", "dangling link"):
        pytest.skip("a name that is not there is not listed")
    write(tmp_path / "a_good.yaml", SCENARIO)
    _make(tmp_path, kind, "b_bad.yaml")
    code, out, err = run_main(capsys, "scenarios", "--dir", str(tmp_path), "--markdown")
    assert code == 0 and "Traceback" not in err, err
    rows = [line for line in out.splitlines() if line.startswith("| `")]
    assert len(rows) == 2, out
    assert "does not load" in rows[1] and words_of(kind) in rows[1], rows[1]
    assert "does not load" not in rows[0]


def words_of(kind: str) -> str:
    return KINDS[kind][1]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero link", "dev-null link"])
def test_scenarios_dir_that_is_not_a_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       kind: str) -> None:
    p, _ = _make(tmp_path, kind, "dir")
    code, _, err = run_main(capsys, "scenarios", "--dir", str(p))
    assert code == 2 and "is not a folder" in err, err


def test_scenarios_dir_with_a_fifo_and_a_zero_link_ends_as_a_subprocess(tmp_path: Path) -> None:
    """The reported hang (FIFO) and MemoryError (/dev/zero), through the real command."""
    write(tmp_path / "a.yaml", SCENARIO)
    os.mkfifo(tmp_path / "b.yaml")
    os.symlink("/dev/zero", tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_bytes("name: d\ndescription: caf\u00e9\npipeline: generalist\n".encode("latin-1"))
    done = subprocess.run([sys.executable, "-m", "medpanel", "scenarios", "--dir", str(tmp_path), "--markdown"],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "named pipe (FIFO)" in done.stdout and "is a device" in done.stdout and "not UTF-8" in done.stdout
