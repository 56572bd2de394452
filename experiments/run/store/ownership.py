"""What belongs to a run directory, and the checks that keep medpanel from writing where it should not.

- A new run takes a folder only if it is empty or holds nothing but an interrupted creation's
  own files: a folder of someone else's files (or the filesystem root) is never taken over.
- Every path the run or its readers write is a regular file or folder, never a link (`check_run_paths`;
  the writes themselves go through `confined`).
- A run's parts (run.json, questions.jsonl, the study) carry one run id, so parts of two runs put
  together are refused before anything resumes; a study that was emptied or stripped is no run's,
  and a resume runs only the run.json the study keeps a copy of.
- No reader writes into a run's own records: only the runner does.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

from medpanel.experiments.errors import UserError, read_json
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.records import RunRecord

RECORDS = frozenset({"run.json", "questions.jsonl", "study.db", "study.db-wal", "study.db-shm", "study.db-journal",
                     "status.json", "runner.lock", "transcripts", "cache", "local_server.log"})
"""The names a run writes at its top level that only the runner may write (report/ is the readers')."""

IN_PLACE = ("study.db", "study.db-wal", "study.db-shm", "study.db-journal", "runner.lock", "local_server.log")
"""The run's files written in place (SQLite, flock, the model server's log): links refused, and other names too."""

TREES = {"transcripts": False, "cache": True, "report": False, "wandb": False}
"""The run's folders, each checked to its depth; True: its files are written in place (diskcache's)."""

CREATION = frozenset({"questions.jsonl", "study.db", "study.db-wal", "study.db-shm", "study.db-journal"})
"""What a run's creation writes before run.json: all a folder may hold for a new run to take it."""

_OPTUNA_TABLES = frozenset({"studies", "version_info", "study_directions", "study_user_attributes",
                            "study_system_attributes", "trials", "trial_user_attributes",
                            "trial_system_attributes", "trial_params", "trial_values", "trial_intermediate_values",
                            "trial_heartbeats", "alembic_version"})


def new_run_id() -> str:
    return uuid.uuid4().hex


def _foreign_tables(db: Path) -> list[str]:
    """Tables of `db` that are neither medpanel's nor Optuna's (a database that is not a run's)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            names = [str(r[0]) for r in conn.execute("select name from sqlite_master where type = 'table'")]
        finally:
            conn.close()
    except sqlite3.Error:
        return ["(not a SQLite database)"]
    return [n for n in names if not n.startswith(("mp_", "sqlite_")) and n not in _OPTUNA_TABLES]


def check_new_run_folder(run_dir: Path) -> None:
    """Refuse a folder a new run must not take over: the filesystem root, or one holding files
    that are not an interrupted medpanel creation's own."""
    if not run_dir.is_dir():
        return
    resolved = run_dir.resolve()
    if resolved == Path(resolved.anchor):
        raise UserError(f"{run_dir} is the filesystem root. Give a new or empty folder for the run", field="--run-dir")
    try:
        entries = sorted(p.name for p in run_dir.iterdir())
    except OSError as exc:
        raise UserError(f"cannot list {run_dir} ({exc.strerror or exc}). Choose another --run-dir",
                        field="--run-dir") from None
    # write_atomic's temporary files (".name.XXXX.tmp") are a killed creation's too.
    foreign = [n for n in entries if n not in CREATION and not (n.startswith(".") and n.endswith(".tmp"))]
    db = run_dir / "study.db"
    if not foreign and db.is_file():
        foreign = [f"study.db (tables {', '.join(t)})" for t in [_foreign_tables(db)] if t]
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise UserError(f"{run_dir} is not empty and is not a medpanel run (it holds {shown}). Give a new or empty "
                        "folder for the run", field="--run-dir")


def check_run_paths(run_dir: Path) -> None:
    """Refuse (`UnsafePath`, exit 2) a run directory where any path the run or its readers write is a
    link, a special file, or (written in place) a file with other names, before anything is read or
    written: each writer goes through `confined` too, so one planted later is refused where it is met."""
    if not run_dir.is_dir():
        return  # the callers name a missing run directory themselves
    folder = Confined(run_dir)
    for name in ("run.json", "questions.jsonl", "status.json", *IN_PLACE):
        folder.check_file(name, in_place=name in IN_PLACE)
    for name, in_place in TREES.items():
        folder.check_tree(name, in_place=in_place)


def study_problem(db: Path) -> str | None:
    """Why the SQLite file `db` does not hold a run's study (None when it may: damage inside it is
    `storage.check_sqlite`'s to name). An emptied file, or one whose tables were dropped, would
    read as a run with nothing done, and a resume would run every pair again."""
    if db.stat().st_size == 0:
        return "it is empty (0 bytes)"
    try:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        try:
            names = {str(r[0]) for r in conn.execute("select name from sqlite_master where type = 'table'")}
            missing = [t for t in ("mp_results", "mp_meta") if t not in names]
            if missing:
                return f"it has no {' and no '.join(missing)} table"
            if conn.execute("select 1 from mp_meta where key = 'run_json'").fetchone() is None:
                return "it keeps no copy of the run.json it was created with"
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return None


def check_parts_belong(run_dir: Path, record: RunRecord, stored_run_json: str | None,
                       stored_questions: str | None, *, plan: bool = False) -> None:
    """Refuse a run whose run.json, questions.jsonl and study come from different runs.

    The study keeps the run.json and questions it was created with: run.json must carry the same
    run id (older runs, made before run ids, the same creation time) and questions.jsonl the same
    text. `plan` (a resume): run.json must also be the very one the study keeps, but for the
    tracker's note, so a run.json edited after a crash (another model, other conditions) cannot
    make the pairs left run on another plan."""
    path = run_dir / "run.json"
    if stored_run_json is None:
        raise UserError("the study database beside it keeps no copy of the run.json it was created with, so it "
                        "does not hold this run's study. Put back this run's own study.db, or start the run again",
                        file=str(path))
    try:
        stored = json.loads(stored_run_json)
    except ValueError:
        stored = {}
    stored = stored if isinstance(stored, dict) else {}
    key = "run_id" if record.run_id or stored.get("run_id") else "created"
    mine = record.run_id if key == "run_id" else record.created
    if mine != stored.get(key):
        raise UserError(f"run.json belongs to another run than the study database beside it (its {key} is "
                        f"{mine!r}, the study's is {stored.get(key)!r}). Put back this run's own run.json, "
                        "or start the run again", file=str(path))
    if plan:
        on_disk = read_json(path, what="run.json", fix="Restore it from a backup")
        differ = first_difference({k: v for k, v in stored.items() if k != "tracker"},
                                  {k: v for k, v in on_disk.items() if k != "tracker"}, "")
        if differ is not None:
            raise UserError(f"was changed since the run was created ({differ} differs from the copy its study keeps), "
                            "and a resume runs the plan it started with. Put back the run's own run.json (the study "
                            "keeps it as mp_meta's run_json), or start a new run with the change", file=str(path))
    qfile = run_dir / "questions.jsonl"
    if stored_questions is not None and qfile.is_file():
        try:
            text = qfile.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError):
            return  # the readers name this file's damage themselves
        if text != stored_questions:
            raise UserError("does not match the questions the study database was created with (it was replaced "
                            "or edited). Put back this run's own questions.jsonl, or start the run again",
                            file=str(qfile))


def first_difference(a: object, b: object, prefix: str) -> str | None:
    """The dotted path of the first place two JSON documents differ (None when equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            found = first_difference(a.get(key), b.get(key), f"{prefix}.{key}" if prefix else str(key))
            if found is not None:
                return found
        return None
    return None if a == b else prefix or "the document"


def run_root_of(path: Path) -> Path | None:
    """The run directory `path` lies in (the nearest folder above it with a run.json), if any."""
    resolved = path.resolve()
    for folder in [resolved, *resolved.parents]:
        if (folder / "run.json").is_file():
            return folder
    return None


def refuse_run_records(path: Path, *, field: str) -> None:
    """Refuse an output path that is, or lies inside, a run's own records (run.json, the study,
    transcripts/ ...): a reader writing there would damage the run."""
    resolved = path.resolve()
    root = run_root_of(resolved)
    if root is None:
        return
    relative = resolved.relative_to(root)
    if not relative.parts or relative.parts[0] in RECORDS:
        raise UserError(f"{path} is one of the run's own records in {root}; only the runner writes there. "
                        f"Choose another file, e.g. --out {root / 'report' / path.name}", field=field)
