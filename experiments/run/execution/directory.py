"""A run directory's life: made for a new run, opened to resume, written out for a joining worker.

run.json is written last, so a directory without it was never a started run (a kill during
creation): it may be reused, and `--resume` says so instead of guessing.
"""

from __future__ import annotations

import json
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from medpanel.agents.model.embedded import served_by
from medpanel.agents.model.spec import credential_problem
from medpanel.agents.redact import URL_MASK, redact_urls
from medpanel.agents.redact import redact_url as redact_url_secrets
from medpanel.agents.types import Condition
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario.budget_match import BudgetReference
from medpanel.experiments.run.scenario.plan import Plan
from medpanel.experiments.run.scenario.scenario import Scenario, load_scenario
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.ownership import (
    check_new_run_folder,
    check_parts_belong,
    check_run_paths,
    new_run_id,
)
from medpanel.experiments.run.store.records import RUN_FORMAT, RunRecord
from medpanel.experiments.run.store.rundir import load_record, read_run_questions, read_status
from medpanel.experiments.run.store.storage import normalize_url, redact_url
from medpanel.experiments.run.store.store import Store
from medpanel.experiments.run.tracking.provenance import git_commit, versions


def check_credentials(plan: Plan) -> None:
    """Every model the run calls has its key (or, for Azure, its URL): one line, exit 2, otherwise."""
    for spec in [plan.scenario.model, *plan.axes.models.values()]:
        problem = credential_problem(spec)
        if problem:
            field, _, message = problem.partition(": ")
            raise UserError(message, field=field)


def new_run_dir(plan: Plan, *, runs_dir: Path | None, run_dir: Path | None) -> Path:
    """The directory for a new run (`<runs_dir>/<name>-<UTC stamp>` unless given), created and checked."""
    if run_dir is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        base = runs_dir or Path(plan.scenario.run.runs_dir)
        run_dir = base / f"{plan.scenario.name}-{stamp}"
        n = 1
        while run_dir.exists():
            n += 1
            run_dir = base / f"{plan.scenario.name}-{stamp}-{n}"
    if (run_dir / "run.json").exists():
        raise UserError(f"{run_dir} already holds a run. Resume it with medpanel run --resume {run_dir}, "
                        "or choose another --run-dir", field="--run-dir")
    if run_dir.exists() and not run_dir.is_dir():
        raise UserError(f"{run_dir} is a file, not a folder. Choose another --run-dir", field="--run-dir")
    check_new_run_folder(run_dir)
    check_run_paths(run_dir)  # an interrupted creation's files: no link among them
    if plan.scenario.run.storage:
        # Reach the storage before anything is written, so a wrong URL leaves no half-made run.
        Store(normalize_url(plan.scenario.run.storage), run_dir).close()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {run_dir} ({exc.strerror or exc}). Choose another --run-dir "
                        "(or run.runs_dir)", field="--run-dir") from None
    return run_dir


def run_record(plan: Plan, *, storage_url: str, scenario_file: str | None) -> dict[str, Any]:
    """run.json: what was planned (scenario, conditions, the pipeline's settings and plans), where it is
    stored, and where it came from (commit, versions, host)."""
    scenario_doc = plan.scenario.model_dump(mode="json")
    if scenario_doc["run"].get("storage"):
        scenario_doc["run"]["storage"] = redact_url(scenario_doc["run"]["storage"])
    model = plan.scenario.model
    resolved = plan.resolvable()
    # No credential in any URL it holds (base_url's `?key=`, `user:password@`): run.json, the study's
    # copy and the report are files anyone with the run may read. A resume restores them from the scenario.
    record: dict[str, Any] = redact_urls(RunRecord.model_validate({
        "format_version": RUN_FORMAT,
        "run_id": new_run_id(),
        "name": plan.scenario.name,
        "scenario_file": scenario_file,
        "scenario": scenario_doc,
        "conditions": [c.model_dump(mode="json") for c in plan.conditions],
        "n_questions": len(plan.questions),
        "repeats": plan.repeats,
        "n_pairs": len(plan.pairs),
        "shard_size": plan.shard_size,
        "budget_reference": plan.budget.to_json() if plan.budget is not None else None,
        "storage": redact_url(storage_url),
        "model": {"backend": model.backend, "name": model.model_name, "base_url": model.base_url,
                  "mode": model.mode, "temperature": model.temperature, "seed": model.seed, "cache": model.cache,
                  "local_server": served_by(model)},
        "accommodations": plan.accommodations(),
        "plan": resolved.record() if resolved is not None else None,
        "git": git_commit(),
        "versions": versions(),
        "host": socket.gethostname(),
        "created": datetime.now(timezone.utc).isoformat(),
    }).model_dump(mode="json"))
    return record


def write_questions(run_dir: Path, plan: Plan) -> str:
    text = "".join(q.model_dump_json() + "\n" for q in plan.questions)
    Confined(run_dir).write("questions.jsonl", text)
    return text


def scenario_file_of(run_dir: Path) -> str | None:
    """The scenario file a half-created run was started from, if its study got that far."""
    db = run_dir / "study.db"
    if not db.is_file():
        return None
    try:
        store = Store(f"sqlite:///{db}", run_dir)
        try:
            raw = store.get_meta("run_json")
        finally:
            store.close()
        return json.loads(raw).get("scenario_file") if raw else None
    except Exception:  # a study cut off mid-creation: the message names SCENARIO instead
        return None


def read_plan(run_dir: Path) -> tuple[Plan, RunRecord]:
    """The plan of an existing run directory and its run.json; a `UserError` naming what is wrong.
    First of all, no path the run writes may be a link (`check_run_paths`): nothing is read or written before."""
    check_run_paths(run_dir)
    if not (run_dir / "run.json").is_file():
        if run_dir.is_dir() and any((run_dir / n).exists() for n in ("questions.jsonl", "study.db")):
            # run.json is written last: this directory's creation was interrupted, nothing ran.
            raise UserError(f"{run_dir} was interrupted while it was being created (it has no run.json), so "
                            f"nothing in it has run yet. Start it again with: medpanel run "
                            f"{scenario_file_of(run_dir) or 'SCENARIO'} --run-dir {run_dir}", field="RUN_DIR")
        raise UserError(f"{run_dir} is not a run directory (no run.json). Pass a directory under runs/",
                        field="RUN_DIR")
    record = load_record(run_dir)
    try:
        scenario = Scenario.model_validate(with_url_secrets(record.scenario, record.scenario_file, run_dir))
        budget = record.budget_reference
        if record.shard_size is None:
            raise KeyError("shard_size")
        # The plan's conditions are the scenario's own model, not run.json's stricter record of them.
        plan = Plan(scenario=scenario, conditions=[Condition.model_validate(c.model_dump()) for c in record.conditions],
                    questions=read_run_questions(run_dir), repeats=record.repeats, shard_size=record.shard_size,
                    budget=BudgetReference.from_json(budget) if budget else None,
                    record=record.plan, file=str(run_dir / "run.json"))
    except (KeyError, TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise UserError(f"run.json is damaged or from an incompatible medpanel ({detail}). Restore it from a "
                        "backup, or start the run again", file=str(run_dir / "run.json")) from None
    return plan, record


def check_parts(run_dir: Path, record: RunRecord, store: Store) -> None:
    """Refuse to go on with a run whose run.json or questions.jsonl is another run's, or whose run.json
    changed since it was created (`ownership`), or whose status.json is not the runner's."""
    read_status(run_dir)
    check_parts_belong(run_dir, record, store.get_meta("run_json"), store.get_meta("questions"), plan=True)


def with_url_secrets(doc: object, scenario_file: str | None, run_dir: Path) -> object:
    """The recorded scenario with the credentials its URLs were written without, taken back from
    the scenario file it was made from (the same URLs once masked); a `UserError` when that file is
    gone or its URLs changed."""
    if not isinstance(doc, dict) or URL_MASK not in json.dumps(doc):
        return doc
    masked: dict[str, str] = {}
    if scenario_file and Path(scenario_file).is_file():
        try:
            source = load_scenario(Path(scenario_file)).model_dump(mode="json")
        except UserError:
            source = {}
        for url in _urls(source):
            masked.setdefault(redact_url_secrets(url), url)

    def restore(value: object) -> object:
        if isinstance(value, str) and URL_MASK in value and "://" in value:
            if value not in masked:
                raise UserError(f"{value} was recorded without its credentials, and the scenario file "
                                f"({scenario_file or 'unknown'}) that holds them is gone or changed. Put it back to "
                                "resume", file=str(run_dir / "run.json"))
            return masked[value]
        if isinstance(value, dict):
            return {k: restore(v) for k, v in value.items()}
        if isinstance(value, list):
            return [restore(v) for v in value]
        return value

    return restore(doc)


def _urls(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if "://" in value else []
    if isinstance(value, dict):
        return [u for v in value.values() for u in _urls(v)]
    if isinstance(value, list):
        return [u for v in value for u in _urls(v)]
    return []


def join_files(url: str, run_dir: Path | None) -> Path:
    """A local folder for a worker joining a shared-storage run: its run.json and questions."""
    store = Store(url, Path("."))
    raw, questions = store.get_meta("run_json"), store.get_meta("questions")
    store.close()
    if raw is None or questions is None:
        raise UserError(f"no medpanel run in {redact_url(url)}. Start one with medpanel run SCENARIO "
                        "(with run.storage set to this URL)", field="RUN_DIR_OR_URL")
    meta = json.loads(raw)
    runs_dir = Path(meta["scenario"]["run"].get("runs_dir", "runs"))
    folder = run_dir or runs_dir / f"{meta['name']}@{socket.gethostname()}"
    folder.mkdir(parents=True, exist_ok=True)
    check_run_paths(folder)
    Confined(folder).write("questions.jsonl", questions)
    Confined(folder).write("run.json", json.dumps(meta, indent=2))
    return folder
