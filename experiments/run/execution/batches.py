"""A run directory's batch records (`model.batch`): `batches/<id>.json` and the replies downloaded.

The model client's queues (`agents/model/batching.py`) write through this journal, so the records
go through the run directory's one writer (`confined.py`: no link followed, whole files only). A
record exists from the moment its batch's input file is uploaded; a session killed while a batch
runs leaves it there, and the next session's queue collects that batch instead of sending its
requests again.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from medpanel.experiments.run.scenario.plan import Plan
from medpanel.experiments.run.store.confined import Confined

FOLDER = "batches"


class RunJournal:
    """`batch_client.Journal` on RUN_DIR/batches."""

    def __init__(self, run_dir: Path) -> None:
        self.own = Confined(run_dir)
        self.folder = Path(run_dir) / FOLDER

    def save(self, name: str, data: bytes) -> None:
        self.own.write(f"{FOLDER}/{name}", data, durable=name.endswith(".json"))

    def read(self, name: str) -> bytes | None:
        path = self.own.check_file(f"{FOLDER}/{name}")
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None

    def names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.folder))
        except FileNotFoundError:
            return []

    def remove(self, name: str) -> None:
        self.own.unlink(f"{FOLDER}/{name}")


@contextlib.contextmanager
def session(run_dir: Path, plan: Plan) -> Iterator[None]:
    """A session's batch queues keep their records in `run_dir` and are closed when it ends."""
    if not any(m.batch.enabled for m in [plan.scenario.model, *plan.axes.models.values()]):
        yield
        return
    # Imported for a batched run only: its API client is the openai SDK's (half a second of start-up).
    from medpanel.agents.model import batch_client

    batch_client.open_session(RunJournal(run_dir))
    try:
        yield
    finally:
        batch_client.close_session()
        batch_client.open_session(None)
