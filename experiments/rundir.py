"""Reading a finished (or partial) run directory: run.json, questions, result rows, transcripts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpanel.experiments.errors import UserError
from medpanel.experiments.report import condition_order, load_meta
from medpanel.experiments.runlock import lock_holder
from medpanel.experiments.store import Row, Store


def storage_url(run_dir: Path, meta: dict[str, Any]) -> str:
    url = meta.get("scenario", {}).get("run", {}).get("storage")
    return url or f"sqlite:///{run_dir / 'study.db'}"


@dataclass
class RunData:
    run_dir: Path
    meta: dict[str, Any]
    rows: list[Row]
    questions: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)

    @property
    def conditions(self) -> list[str]:
        return condition_order(self.rows, [c["slug"] for c in self.meta.get("conditions", [])])

    def transcript(self, row: Row) -> dict[str, Any] | None:
        path = self.run_dir / row.transcript
        if not path.is_file():
            return None
        return json.loads(path.read_text(encoding="utf-8"))


def read_questions(run_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The run's `questions.jsonl` as records keyed by (dataset, qid); empty if it has none."""
    questions: dict[tuple[str, str], dict[str, Any]] = {}
    qfile = run_dir / "questions.jsonl"
    if qfile.is_file():
        for line in qfile.read_text(encoding="utf-8").splitlines():
            if line.strip():
                q = json.loads(line)
                questions[(str(q["dataset"]), str(q["qid"]))] = q
    return questions


def load_run(run_dir: Path, *, arg: str = "RUN_DIR") -> RunData:
    """Everything the viewer, export and audit need; a UserError if it is not a run directory."""
    run_dir = Path(run_dir)
    if not (run_dir / "run.json").is_file():
        raise UserError(f"{run_dir} is not a run directory (no run.json). Pass a directory under runs/", field=arg)
    meta = load_meta(run_dir)
    store = Store(storage_url(run_dir, meta), run_dir)
    try:
        rows = store.rows()
    finally:
        store.close()
    questions = read_questions(run_dir)
    status_path = run_dir / "status.json"
    status = json.loads(status_path.read_text(encoding="utf-8")) if status_path.is_file() else {}
    if status.get("state") == "running" and lock_holder(run_dir) is None:
        status["state"] = "killed"  # a session wrote "running" and never finished: resume it
    return RunData(run_dir=run_dir, meta=meta, rows=rows, questions=questions, status=status)
