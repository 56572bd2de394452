"""Inputs that used to end in a traceback end in one line naming the file or field and the fix, exit 2:
a damaged corpus (manifest, documents, BM25 index) under `corpus list`, `search` and `ingest`, an
in-memory SQLite storage, a malformed or failing pipeline path, a corpus with nothing to index."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from medpanel.experiments.cli.main import main

from .cli_helpers import run_main
from .conftest import write

pytestmark = pytest.mark.timeout(120)

DOCS = "".join(json.dumps({"id": f"d{i}", "title": t, "content": c}) + "\n" for i, (t, c) in enumerate([
    ("DKA", "insulin fluids potassium in diabetic ketoacidosis"),
    ("MI", "aspirin for myocardial infarction"),
]))


@pytest.fixture(scope="module")
def good_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("home")
    docs = write(home / "docs.jsonl", DOCS)
    old = os.environ.get("MEDPANEL_HOME")
    os.environ["MEDPANEL_HOME"] = str(home)
    try:
        main(["corpus", "ingest", str(docs), "--name", "good", "--no-progress"])
    except SystemExit as done:
        assert not done.code
    finally:
        if old is None:
            del os.environ["MEDPANEL_HOME"]
        else:
            os.environ["MEDPANEL_HOME"] = old
    return home / "corpora" / "good"


def _garbage_all(folder: Path) -> None:
    for f in folder.iterdir():
        f.write_text("garbage")


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    path.unlink()
    make(path)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "manifest garbage": lambda c: (c / "manifest.json").write_text('{"name":'),
    "manifest empty": lambda c: (c / "manifest.json").write_text(""),
    "manifest wrong shape": lambda c: (c / "manifest.json").write_text('{"name": 3}'),
    "manifest a list": lambda c: (c / "manifest.json").write_text("[1, 2]"),
    "manifest latin-1": lambda c: (c / "manifest.json").write_bytes(b'{"name": "caf\xe9"}'),
    "manifest fifo": lambda c: _replace(c / "manifest.json", os.mkfifo),
    "manifest dev-zero link": lambda c: _replace(c / "manifest.json", lambda p: os.symlink("/dev/zero", p)),
    "docs garbage line": lambda c: (c / "docs.jsonl").open("a").write("{garbage\n"),
    "docs not an object": lambda c: (c / "docs.jsonl").open("a").write("[1]\n"),
    "docs latin-1": lambda c: (c / "docs.jsonl").open("ab").write(b'{"id": "caf\xe9"}\n'),
    "docs fifo": lambda c: _replace(c / "docs.jsonl", os.mkfifo),
    "bm25 garbage": lambda c: _garbage_all(c / "bm25"),
    "bm25 params garbage": lambda c: (c / "bm25" / "params.index.json").write_text("{"),
    "bm25 vocab missing": lambda c: (c / "bm25" / "vocab.index.json").unlink(),
    "bm25 array truncated": lambda c: (c / "bm25" / "data.csc.index.npy").write_bytes(b"\x93NUMPY"),
    "bm25 fifo": lambda c: _replace(c / "bm25" / "params.index.json", os.mkfifo),
    "bm25 folder gone": lambda c: shutil.rmtree(c / "bm25"),
    "bm25 a file": lambda c: (shutil.rmtree(c / "bm25"), (c / "bm25").write_text("x")),
}
# Which commands read which part: list reads the manifest; search all three; ingest the manifest
# and the documents (it rebuilds the index).
READS = {"list": ("manifest",), "search": ("manifest", "docs", "bm25"), "ingest": ("manifest", "docs")}


@pytest.mark.parametrize("command", list(READS))
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_corpus_is_one_line_naming_the_file_and_the_rebuild(
        tmp_path: Path, good_corpus: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        damage: str, command: str) -> None:
    home = tmp_path / "home"
    corpus = home / "corpora" / "c1"
    shutil.copytree(good_corpus, corpus)
    manifest = json.loads((corpus / "manifest.json").read_text())
    manifest["name"] = "c1"
    (corpus / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setenv("MEDPANEL_HOME", str(home))
    DAMAGE[damage](corpus)
    docs = write(tmp_path / "in.jsonl", DOCS)
    args = {"list": ["corpus", "list"], "search": ["corpus", "search", "c1", "insulin"],
            "ingest": ["corpus", "ingest", str(docs), "--name", "c1", "--no-progress"]}[command]
    code, out, err = run_main(capsys, *args)
    assert "Traceback" not in err
    unrecognised = damage in ("manifest fifo", "manifest dev-zero link") and command != "ingest"
    if unrecognised:  # no manifest file: not taken for a corpus at all (listed without it, or unknown)
        assert code in (0, 2) and (code == 0 or "unknown corpus 'c1'" in err), err
    elif damage.split()[0] in READS[command]:
        assert code == 2, (out, err)
        assert err.count("\n") == 1 and str(corpus) in err, err
        assert "ingest" in err, err  # the fix: how to rebuild it
    else:
        assert code in (0, 2), (out, err)  # that part is not read, or is rebuilt
        if code == 2:
            assert err.count("\n") == 1, err


def test_a_corpus_with_nothing_to_index_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = write(tmp_path / "d.jsonl", json.dumps({"id": "d1", "title": "a", "content": "the of"}) + "\n")
    code, _, err = run_main(capsys, "corpus", "ingest", str(docs), "--name", "c1", "--no-progress")
    assert code == 2 and "no document holds a word" in err and err.count("\n") == 1, err


SCENARIO = """name: s
pipeline: {pipeline}
flags: {{c: [0]}}
dataset: {{source: sample, limit: 1}}
model: {{backend: scripted}}
run: {{workers: 1{run}}}
"""


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite://", "sqlite:///file::memory:?cache=shared",
                                 "sqlite:///x.db?mode=memory", "sqlite+pysqlite:///:memory:"])
@pytest.mark.parametrize("where", ["scenario", "--storage"])
def test_an_in_memory_sqlite_storage_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch, url: str,
                                                            where: str) -> None:
    monkeypatch.chdir(tmp_path)
    run = f", storage: {json.dumps(url)}" if where == "scenario" else ""
    sc = write(tmp_path / "s.yaml", SCENARIO.format(pipeline="generalist", run=run))
    extra = ["--storage", url] if where == "--storage" else []
    code, _, err = run_main(capsys, "run", str(sc), "--quiet", "--run-dir", str(tmp_path / "r"), *extra)
    assert code == 2 and "in-memory SQLite" in err and err.count("\n") == 1, err
    assert ("run.storage" if where == "scenario" else "--storage") in err
    assert not (tmp_path / "r").exists()  # refused before a run directory was made


def test_a_file_sqlite_storage_is_still_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sc = write(tmp_path / "s.yaml", SCENARIO.format(pipeline="generalist",
                                                    run=f", storage: 'sqlite:///{tmp_path}/memory.db'"))
    code, _, err = run_main(capsys, "validate", str(sc))
    assert code == 0, err


@pytest.mark.parametrize("pipeline", ["..evil:X", ".evil:X", ":X", "os:", "a b:C", "evil-mod:X", "1mod:X",
                                      "mod:1X", "mod:X.Y", "mod.:X", "mod..sub:X", "mod:X:Y"])
def test_a_malformed_pipeline_path_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               pipeline: str) -> None:
    sc = write(tmp_path / "s.yaml", SCENARIO.format(pipeline=json.dumps(pipeline), run=""))
    code, _, err = run_main(capsys, "validate", str(sc))
    assert code == 2 and "pipeline" in err and err.count("\n") == 1 and "Traceback" not in err, err


@pytest.mark.parametrize(("body", "words"), [("raise RuntimeError('boom')", "RuntimeError: boom"),
                                             ("def (:", "SyntaxError"),
                                             ("import no_such_module_zz", "No module named"),
                                             ("1 / 0", "ZeroDivisionError"),
                                             ("raise SystemError('x')", "SystemError")])
def test_a_pipeline_module_that_fails_as_it_is_imported_is_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, body: str,
        words: str) -> None:
    name = f"failing_{abs(hash(body)) % 10**8}"
    write(tmp_path / f"{name}.py", body + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    sc = write(tmp_path / "s.yaml", SCENARIO.format(pipeline=f"{name}:Pipe", run=""))
    code, _, err = run_main(capsys, "validate", str(sc))
    assert code == 2 and words in err and err.count("\n") == 1, err


def test_an_evidence_source_path_goes_through_the_same_check() -> None:
    from medpanel.plugins import PluginError, load

    for name in ("..evil:X", ":X", "os:"):
        with pytest.raises(PluginError, match="is not a evidence source path"):
            load(name, "medpanel.sources", "evidence source")
