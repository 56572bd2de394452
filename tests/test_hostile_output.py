"""What a command prints from a file is shown without its terminal controls, and the streams it prints
to may be closed, cut off or not UTF-8 without a traceback: real subprocesses of the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from medpanel.experiments.cli.main import main
from medpanel.experiments.errors import error_line
from medpanel.inputs import one_line, printable

from .conftest import write

pytestmark = pytest.mark.timeout(120)

ESCAPES = {
    "OSC title": ("\x1b]0;OWNED\x07", "\\x1b]0;OWNED\\x07"),
    "OSC 8 hyperlink": ("\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\", "\\x1b]8;;http://evil.example/"),
    "CSI clear screen": ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),
    "CSI colour": ("\x1b[31mred\x1b[0m", "\\x1b[31mred"),
    "C1 CSI": ("\x9b2J", "\\x9b2J"),
    "bell": ("\x07", "\\x07"),
    "backspace": ("abc\x08\x08\x08xyz", "abc\\x08"),
    "carriage return": ("safe\rEVIL", "safe\\x0dEVIL"),
    "bidi override": ("\u202eevil", "\\u202eevil"),
    "bidi isolate": ("\u2066x\u2069", "\\u2066x\\u2069"),
    "line separator": ("a\u2028b", "a\\u2028b"),
    "DEL": ("a\x7fb", "a\\x7fb"),
}
RAW = [raw for raw, _ in ESCAPES.values()]


def _has_control(text: str) -> bool:
    return any(c in text for c in ("\x1b", "\x9b", "\x07", "\x08", "\r", "\u202e", "\u2066", "\u2028", "\x7f"))


@pytest.mark.parametrize("name", list(ESCAPES))
def test_printable_escapes_each_control(name: str) -> None:
    raw, shown = ESCAPES[name]
    out = printable(f"before {raw} after")
    assert shown in out and not _has_control(out), out


@pytest.mark.parametrize("text", ["plain", "caf\u00e9 \u2713 \u65e5\u672c", "tab\there\nnewline", "[bold]x[/bold]"])
def test_printable_leaves_ordinary_text_as_it_is(text: str) -> None:
    assert printable(text) == text


def test_printable_reaches_into_json_like_values() -> None:
    value = {"a": ["\x1b[2J", {"b": "\u202e"}], "n": 3}
    assert printable(value) == {"a": ["\\x1b[2J", {"b": "\\u202e"}], "n": 3}


def test_one_line_folds_newlines_and_escapes() -> None:
    assert one_line("a\nb\t\x1b]0;x\x07") == "a b \\x1b]0;x\\x07"


def _escaped_scenario(folder: Path, name: str, raw: str) -> Path:
    import json

    return write(folder / f"{name}.yaml", f"name: s\ndescription: {json.dumps('Hello ' + raw + ' world.')}\n"
                 "pipeline: generalist\nflags: {c: [0]}\n")


@pytest.mark.parametrize("markdown", [False, True], ids=["table", "markdown"])
@pytest.mark.parametrize("name", list(ESCAPES))
def test_scenarios_dir_prints_a_description_without_its_controls(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 name: str, markdown: bool) -> None:
    raw, _ = ESCAPES[name]
    _escaped_scenario(tmp_path, "evil", raw)
    main(["scenarios", "--dir", str(tmp_path), *(["--markdown"] if markdown else [])])
    out, err = capsys.readouterr()
    assert "Hello" in out and not _has_control(out + err), repr(out)


@pytest.fixture
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CLI's console took its width when first imported, which in a test worker may be under
    # another test's COLUMNS: these assertions read whole cells, so the table must not fold them.
    from medpanel.experiments.cli.console import console

    monkeypatch.setattr(console, "_width", 400)


@pytest.mark.usefixtures("wide_console")
def test_scenarios_dir_shows_rich_markup_in_a_description_as_written(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "m.yaml", 'name: m\ndescription: "[link=http://evil.example]click[/link] [bold]b[/bold]"\n'
          "pipeline: generalist\nflags: {c: [0]}\n")
    main(["scenarios", "--dir", str(tmp_path)])
    out, _ = capsys.readouterr()
    assert "[link=http://evil.example]click[/link]" in out and "\x1b]8" not in out


def test_a_file_name_with_controls_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _escaped_scenario(tmp_path, "x\x1b]0;T\x07", "")
    main(["scenarios", "--dir", str(tmp_path), "--markdown"])
    out, _ = capsys.readouterr()
    assert "\\x1b]0;T\\x07" in out and not _has_control(out)


@pytest.mark.parametrize("name", ["OSC title", "CSI clear screen", "bidi override"])
def test_validate_prints_a_model_name_without_its_controls(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            name: str) -> None:
    import json

    raw, _ = ESCAPES[name]
    sc = write(tmp_path / "s.yaml", "name: s\npipeline: generalist\nflags: {c: [0]}\n"
               "dataset: {source: sample, limit: 1}\n"
               f"model: {{backend: scripted, name: {json.dumps('m' + raw + '[bold]')}}}\n")
    main(["validate", str(sc)])
    out, _ = capsys.readouterr()
    assert "[bold]" in out and not _has_control(out), repr(out)


@pytest.mark.parametrize("name", ["OSC title", "CSI clear screen", "bidi override", "carriage return"])
def test_an_error_line_quoting_a_file_is_escaped(capsys: pytest.CaptureFixture[str], name: str) -> None:
    raw, shown = ESCAPES[name]
    error_line(f"bad.yaml: name: {raw!s} is not a slug")
    _, err = capsys.readouterr()
    assert err.count("\n") == 1 and shown in err and not _has_control(err), repr(err)


@pytest.mark.parametrize("name", ["OSC title", "CSI clear screen"])
def test_corpus_search_prints_a_title_without_its_controls(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           name: str) -> None:
    import json

    raw, _ = ESCAPES[name]
    docs = write(tmp_path / "d.jsonl", json.dumps({"id": "d1" + raw, "title": "DKA" + raw,
                                                   "content": "insulin and fluids"}) + "\n")
    main(["corpus", "ingest", str(docs), "--name", "c1", "--no-progress"])
    capsys.readouterr()
    main(["corpus", "search", "c1", "insulin"])
    out, _ = capsys.readouterr()
    assert "DKA" in out and not _has_control(out), repr(out)


# -- the streams ----------------------------------------------------------------------------------


def _medpanel(*args: str, **kw: object) -> list[str]:
    return [sys.executable, "-m", "medpanel", *args]


SCENARIO = "name: s\ndescription: caf\u00e9 \u2713 \u65e5\u672c.\npipeline: generalist\nflags: {c: [0]}\n"


@pytest.mark.parametrize("command", [["scenarios"], ["validate", "{sc}"], ["--help"]])
def test_a_closed_stdout_is_one_line_exit_2(tmp_path: Path, command: list[str]) -> None:
    sc = write(tmp_path / "s.yaml", SCENARIO + "dataset: {source: sample, limit: 1}\nmodel: {backend: scripted}\n")
    args = [a.replace("{sc}", str(sc)) for a in command]
    done = subprocess.run(_medpanel(*args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          timeout=90, cwd=tmp_path, preexec_fn=lambda: os.close(1))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "standard output is closed" in done.stderr, done.stderr


def test_a_closed_stdout_never_lends_its_number_to_a_file(tmp_path: Path) -> None:
    """With fd 1 closed, the next file opened would get it, and whatever is printed would land in
    that file: fds 0-2 are filled with /dev/null before anything is opened."""
    code = ("import os, sys; from medpanel.experiments.cli import streams; streams.prepare(); "
            "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT); print(fd)")
    target = tmp_path / "f.txt"
    done = subprocess.run([sys.executable, "-c", code, str(target)], stderr=subprocess.PIPE, text=True, timeout=60,
                          preexec_fn=lambda: os.close(1))
    assert done.returncode == 0, done.stderr
    assert target.read_text() == ""  # the print went to /dev/null, not into the file


@pytest.mark.parametrize("command", [["scenarios"], ["scenarios", "--markdown"], ["validate", "{sc}"],
                                     ["corpus", "list"]])
def test_a_reader_that_goes_away_is_one_line_exit_2(tmp_path: Path, command: list[str]) -> None:
    """`medpanel ... | head -0`: the pipe's reader is gone before anything is written."""
    sc = write(tmp_path / "s.yaml", SCENARIO + "dataset: {source: sample, limit: 1}\nmodel: {backend: scripted}\n")
    if command == ["corpus", "list"]:
        docs = write(tmp_path / "d.jsonl", '{"id": "d1", "title": "DKA", "content": "insulin fluids"}\n')
        subprocess.run(_medpanel("corpus", "ingest", str(docs), "--name", "c1", "--no-progress"), check=True,
                       timeout=90, capture_output=True, env={**os.environ, "MEDPANEL_HOME": str(tmp_path / "h")})
    args = [a.replace("{sc}", str(sc)) for a in command]
    read, write_end = os.pipe()
    os.close(read)  # as head -0 does: gone before the first byte
    try:
        done = subprocess.run(_medpanel(*args), stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=90,
                              cwd=tmp_path, env={**os.environ, "MEDPANEL_HOME": str(tmp_path / "h")})
    finally:
        os.close(write_end)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "closed by the program reading it" in done.stderr, done.stderr


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONUTF8": "0",
                                                                 "PYTHONCOERCECLOCALE": "0", "PYTHONIOENCODING": ""},
                                 {"PYTHONIOENCODING": "latin-1"}], ids=["ascii", "C locale", "latin-1"])
@pytest.mark.parametrize("command", [["scenarios", "--dir", "."], ["scenarios", "--dir", ".", "--markdown"],
                                     ["validate", "bad.yaml"]])
def test_an_encoding_without_utf8_prints_escapes_not_a_traceback(tmp_path: Path, env: dict[str, str],
                                                                 command: list[str]) -> None:
    write(tmp_path / "s.yaml", SCENARIO)
    write(tmp_path / "bad.yaml", "name: \u2713\u65e5\n")  # an error line quoting text the encoding lacks
    environ = {k: v for k, v in os.environ.items() if k not in ("LANG", "LC_ALL", "PYTHONIOENCODING")}
    environ.update({k: v for k, v in env.items() if v})
    done = subprocess.run(_medpanel(*command), capture_output=True, timeout=90, cwd=tmp_path, env=environ)
    err = done.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and "UnicodeEncodeError" not in err, err
    if command[0] == "scenarios":
        assert done.returncode == 0, err
        assert b"caf" in done.stdout
    else:
        assert done.returncode == 2 and err.count("\n") == 1, err


@pytest.mark.usefixtures("wide_console")
def test_runs_lists_a_run_whose_name_holds_controls_escaped_and_a_fifo_status_without_hanging(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    sc = write(tmp_path / "s.yaml", SCENARIO + "dataset: {source: sample, limit: 1}\nmodel: {backend: scripted}\n")
    runs = tmp_path / "runs"
    try:
        main(["run", str(sc), "--quiet", "--run-dir", str(runs / "a")])
    except SystemExit as done:
        assert not done.code
    shutil.copytree(runs / "a", runs / "b\x1b]0;OWNED\x07")
    (runs / "a" / "status.json").unlink()
    os.mkfifo(runs / "a" / "status.json")
    capsys.readouterr()
    main(["runs", str(runs)])
    out, _ = capsys.readouterr()
    assert "\\x1b]0;OWNED\\x07" in out and not _has_control(out), repr(out)
