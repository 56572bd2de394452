"""A run directory's own paths are written only as regular files and folders inside it.

Each case plants, in a copy of a real run directory, a symbolic link (to a file, to a folder, or
dangling), a hard link, a FIFO or a file of the wrong kind where the run or one of its readers
writes, and runs the command a user would (through the console's `main`, as the hostile-input
probes do). The command refuses in one line naming the path, exit 2, and what lies outside the
run is unchanged (no byte written, no file made). Then the writer itself (`confined.Confined`),
including a link planted while a run is going.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from medpanel.agents.model.scripted import ScriptedChatCompletionClient
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.store.confined import Confined, UnsafePath
from medpanel.experiments.run.store.runlock import run_lock
from tests.rundir_helpers import copy_run, created_run, fingerprint, finished_run, run_cli

# -- what a case plants --------------------------------------------------------------------------

Plant = Callable[[Path, Path], Path]
"""(run directory, a folder outside it) -> the outside path that must stay as it was."""


def link_to_file(name: str, *, keep: bool = False, content: str = "the user's own file\n") -> Plant:
    """`name` a symbolic link to a file outside holding `content` (a copy of the run's own when `keep`)."""
    def plant(run: Path, outside: Path) -> Path:
        target = outside / "target-file"
        own = run / name
        if keep and own.is_file():
            target.write_bytes(own.read_bytes())
            own.unlink()
        else:
            target.write_text(content)
            own.unlink(missing_ok=True)
        own.parent.mkdir(parents=True, exist_ok=True)
        own.symlink_to(target)
        return target
    return plant


def link_to_nothing(name: str) -> Plant:
    """`name` a dangling link: a write through it would create the file outside."""
    def plant(run: Path, outside: Path) -> Path:
        target = outside / "would-be-made"
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        if (run / name).exists():
            (run / name).unlink()
        (run / name).symlink_to(target)
        return target
    return plant


def link_to_folder(name: str) -> Plant:
    def plant(run: Path, outside: Path) -> Path:
        target = outside / "target-folder"
        target.mkdir()
        (target / "keep.txt").write_text("the user's own folder\n")
        own = run / name
        if own.is_dir():
            for p in sorted(own.rglob("*"), reverse=True):
                p.unlink() if p.is_file() else p.rmdir()
            own.rmdir()
        own.parent.mkdir(parents=True, exist_ok=True)
        own.symlink_to(target, target_is_directory=True)
        return target
    return plant


def hard_link(name: str) -> Plant:
    """`name` another name of a file outside (for a file written in place)."""
    def plant(run: Path, outside: Path) -> Path:
        target = outside / "target-file"
        own = run / name
        if own.is_file():
            target.write_bytes(own.read_bytes())
            own.unlink()
        else:
            target.write_text("the user's own file\n")
        own.parent.mkdir(parents=True, exist_ok=True)
        os.link(target, own)
        return target
    return plant


def fifo(name: str) -> Plant:
    def plant(run: Path, outside: Path) -> Path:
        if (run / name).exists():
            (run / name).unlink()
        os.mkfifo(run / name)
        return outside
    return plant


def folder_where_file(name: str) -> Plant:
    def plant(run: Path, outside: Path) -> Path:
        if (run / name).exists():
            (run / name).unlink()
        (run / name).mkdir()
        return outside
    return plant


def file_where_folder(name: str) -> Plant:
    def plant(run: Path, outside: Path) -> Path:
        (run / name).write_text("not a folder\n")
        return outside
    return plant


# -- the commands --------------------------------------------------------------------------------

COMMANDS: dict[str, Callable[[Path], list[str]]] = {
    "resume": lambda run: ["run", "--resume", str(run), "--quiet"],
    "report": lambda run: ["report", str(run)],
    "report-html": lambda run: ["report", str(run), "--html"],
    "export": lambda run: ["export", str(run)],
    "inspect": lambda run: ["export", str(run), "--format", "inspect"],
    "audit": lambda run: ["audit", str(run)],
    "show": lambda run: ["show", str(run), "s01"],
}


@dataclass
class LinkCase:
    id: str
    base: str
    """created (every pair to do), finished, or interrupted (a creation killed before run.json)."""
    plant: Plant
    command: str
    expect: str


CASES = [
    # A resume writes the lock, status.json, the study, transcripts/ and cache/.
    LinkCase("lock-symlink-file", "created", link_to_file("runner.lock"), "resume", "runner.lock"),
    LinkCase("lock-symlink-dangling", "created", link_to_nothing("runner.lock"), "resume", "runner.lock"),
    LinkCase("lock-hard-link", "created", hard_link("runner.lock"), "resume", "runner.lock"),
    LinkCase("lock-fifo", "created", fifo("runner.lock"), "resume", "runner.lock"),
    LinkCase("status-symlink-file", "created", link_to_file("status.json"), "resume", "status.json"),
    LinkCase("status-symlink-dangling", "created", link_to_nothing("status.json"), "resume", "status.json"),
    LinkCase("status-is-folder", "created", folder_where_file("status.json"), "resume", "status.json"),
    LinkCase("study-symlink", "created", link_to_file("study.db", keep=True), "resume", "study.db"),
    LinkCase("study-hard-link", "created", hard_link("study.db"), "resume", "study.db"),
    LinkCase("study-wal-dangling", "created", link_to_nothing("study.db-wal"), "resume", "study.db-wal"),
    LinkCase("study-shm-dangling", "created", link_to_nothing("study.db-shm"), "resume", "study.db-shm"),
    LinkCase("study-journal-symlink", "created", link_to_file("study.db-journal"), "resume", "study.db-journal"),
    LinkCase("transcripts-symlink", "created", link_to_folder("transcripts"), "resume", "transcripts"),
    LinkCase("transcripts-condition-symlink", "created", link_to_folder("transcripts/c0"), "resume",
             "transcripts/c0"),
    LinkCase("transcripts-condition-dangling", "created", link_to_nothing("transcripts/c1"), "resume",
             "transcripts/c1"),
    LinkCase("transcripts-is-file", "created", file_where_folder("transcripts"), "resume", "transcripts"),
    LinkCase("transcript-file-dangling", "created", link_to_nothing("transcripts/c0/medqa-style__s01.json"),
             "resume", "medqa-style__s01.json"),
    LinkCase("cache-symlink", "created", link_to_folder("cache"), "resume", "cache"),
    LinkCase("cache-db-symlink", "created", link_to_file("cache/cache.db"), "resume", "cache.db"),
    LinkCase("cache-db-hard-link", "created", hard_link("cache/cache.db"), "resume", "cache.db"),
    LinkCase("run-json-symlink", "created", link_to_file("run.json", keep=True), "resume", "run.json"),
    LinkCase("questions-symlink", "created", link_to_file("questions.jsonl", keep=True), "resume",
             "questions.jsonl"),
    LinkCase("server-log-symlink", "created", link_to_file("local_server.log"), "resume", "local_server.log"),
    LinkCase("wandb-symlink", "created", link_to_folder("wandb"), "resume", "wandb"),
    # The readers write report/ (and open the study, which SQLite writes).
    LinkCase("report-symlink", "finished", link_to_folder("report"), "report", "report"),
    LinkCase("report-md-symlink", "finished", link_to_file("report/report.md"), "report", "report.md"),
    LinkCase("report-md-dangling", "finished", link_to_nothing("report/report.md"), "report", "report.md"),
    LinkCase("results-symlink", "finished", link_to_file("report/results.jsonl"), "export", "results.jsonl"),
    LinkCase("leakage-symlink", "finished", link_to_file("report/leakage.json", content="[]\n"), "audit",
             "leakage.json"),
    LinkCase("questions-pages-symlink", "finished", link_to_folder("report/questions"), "report-html",
             "report/questions"),
    LinkCase("plots-symlink", "finished", link_to_folder("report/plots"), "report-html", "report/plots"),
    LinkCase("index-symlink", "finished", link_to_file("report/index.html"), "report-html", "index.html"),
    LinkCase("inspect-folder-symlink", "finished", link_to_folder("report/inspect"), "inspect", "report/inspect"),
    LinkCase("show-study-symlink", "finished", link_to_file("study.db", keep=True), "show", "study.db"),
    LinkCase("report-study-wal-dangling", "finished", link_to_nothing("study.db-wal"), "report", "study.db-wal"),
    # A new run in a folder an interrupted creation left: its files are taken only as they are.
    LinkCase("creation-study-symlink", "interrupted", link_to_file("study.db", content=""), "create", "study.db"),
    LinkCase("creation-questions-symlink", "interrupted", link_to_file("questions.jsonl"), "create",
             "questions.jsonl"),
]


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("links-base")
    created = created_run(root, name="created")
    finished = finished_run(root, name="finished")
    interrupted = root / "interrupted"
    interrupted.mkdir()
    (interrupted / "questions.jsonl").write_text((created / "questions.jsonl").read_text())
    return {"created": created, "finished": finished, "interrupted": interrupted, "scenario": root / "created.yaml"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_link_where_the_run_writes_is_refused_and_nothing_outside_changes(
        case: LinkCase, bases: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(bases[case.base], tmp_path / "run")
    outside = tmp_path / "outside"
    outside.mkdir()
    watched = case.plant(run, outside)
    before = fingerprint(watched)
    if case.command == "create":
        argv = ["run", str(bases["scenario"]), "--run-dir", str(run), "--quiet"]
    else:
        argv = COMMANDS[case.command](run)
    outcome = run_cli(argv)
    outcome.refused(case.expect)
    assert fingerprint(watched) == before, f"{argv} changed {watched} outside the run"
    assert not (outside / "would-be-made").exists()


def test_a_hard_linked_report_file_is_replaced_not_written_through(bases: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(bases["finished"], tmp_path / "run")
    outside = tmp_path / "mine.csv"
    outside.write_text("the user's own table\n")
    (run / "report").mkdir(exist_ok=True)
    os.link(outside, run / "report" / "report.md")
    outcome = run_cli(["report", str(run)])
    assert outcome.res.rc == 0, outcome.res.err + outcome.res.tb
    assert outside.read_text() == "the user's own table\n"
    assert (run / "report" / "report.md").read_text().startswith("# Report")


# -- the writer itself -----------------------------------------------------------------------


def test_the_writer_refuses_a_link_on_the_way_and_writes_nothing_through_it(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "a").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePath, match="symbolic link"):
        Confined(root).write("a/b/c.json", "{}")
    assert list(outside.iterdir()) == []


def test_the_writer_refuses_a_fifo_at_once_instead_of_waiting_on_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "runner.lock")
    with pytest.raises(UnsafePath, match="FIFO"):
        Confined(tmp_path).open_own("runner.lock")
    with pytest.raises(UnsafePath, match="FIFO"):
        Confined(tmp_path).write("runner.lock", "x")


def test_the_writer_refuses_a_file_in_place_with_another_name(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").write_text("keep")
    os.link(tmp_path / "elsewhere", tmp_path / "runner.lock")
    with pytest.raises(UnsafePath, match="2 names"):
        Confined(tmp_path).open_own("runner.lock")
    assert (tmp_path / "elsewhere").read_text() == "keep"


def test_the_lock_refuses_a_link_and_leaves_its_target_alone(tmp_path: Path) -> None:
    target = tmp_path / "important.txt"
    target.write_text("do not truncate me\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "runner.lock").symlink_to(target)
    with pytest.raises(UnsafePath, match=r"runner\.lock"), run_lock(run, "me"):
        pass
    assert target.read_text() == "do not truncate me\n"
    assert (run / "runner.lock").is_symlink()  # the writer removes no link it did not make


def test_a_link_planted_while_a_run_goes_stops_it_resumably_and_is_not_followed(
        bases: dict[str, Path], tmp_path: Path) -> None:
    run = copy_run(bases["created"], tmp_path / "run")
    outside = tmp_path / "outside"
    outside.mkdir()

    class Planting(ScriptedChatCompletionClient):
        async def create(self, *args, **kwargs):  # the first call plants the link, as another process could
            folder = run / "transcripts"
            if not folder.is_symlink():  # before the first commit opens the worker's log there
                if folder.is_dir():
                    folder.rmdir()
                folder.symlink_to(outside, target_is_directory=True)
            return await super().create(*args, **kwargs)

    runner = Runner.open(run)
    runner.client_factory = lambda spec: Planting()
    status = runner.run(install_signals=False)
    assert status["state"] == "stopped", status
    assert "transcripts" in status["reason"] and "symbolic link" in status["reason"], status["reason"]
    assert list(outside.iterdir()) == []
    with sqlite3.connect(run / "study.db") as conn:
        rows = conn.execute("select transcript from mp_results").fetchall()
    assert rows == []  # the first commit met the link: nothing committed, nothing written through it
    assert json.loads((run / "status.json").read_text())["state"] == "stopped"
