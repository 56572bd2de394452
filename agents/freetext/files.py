"""Free-text task files as the loader and the grader read them: one file, or a folder of them.

A free-text path (`dataset.path` of `source: freetext`, and `settings.rubric_file`) is a file or a
folder. A folder's files are read in name order: every `*.jsonl` is a file of rubric tasks (the
packaged sample's layout, which is HealthBench's), every `*.json` is a MedRBench case file. Each
file is recognised by its own published layout and refused in one line when it matches none. So
one run can hold HealthBench Hard and both MedRBench stages, Table 3's three columns.

Why here, on a shared floor: the run room reads these files as questions (the `freetext` source)
and CLEAR's pipeline looks up a question's grading key (rubric or reference answer) in them when it
grades; the run room imports no method and agents never import from experiments.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from medpanel.agents.freetext.medrbench import PUBLISHED as MEDRBENCH_PUBLISHED
from medpanel.agents.freetext.medrbench import CaseFileError, MedRCase, read_medrbench
from medpanel.agents.freetext.tasks import PUBLISHED as HEALTHBENCH_PUBLISHED
from medpanel.agents.freetext.tasks import FreeTextTask, TaskFileError, read_tasks, task_path
from medpanel.agents.types import Question

Task = FreeTextTask | MedRCase

WHERE_PUBLISHED = f"{HEALTHBENCH_PUBLISHED}; {MEDRBENCH_PUBLISHED}"
"""Said when a free-text path does not exist: nothing is downloaded, the user points at files they have."""


def task_files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".jsonl", ".json"))
        if not files:
            raise TaskFileError(f"{path}: the folder holds no .jsonl (rubric tasks, HealthBench) or .json "
                                f"(MedRBench) file. {WHERE_PUBLISHED}")
        return files
    if not path.is_file():
        raise TaskFileError(f"{path}: no such file or folder. Nothing is downloaded: {WHERE_PUBLISHED}")
    return [path]


def read_file(file: Path) -> list[Task]:
    if file.suffix != ".json":
        return list(read_tasks(file))
    try:
        data = json.loads(file.read_text(encoding="utf-8-sig"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TaskFileError(f"{file}: not JSON ({exc}). A .json free-text file is a MedRBench case file") from None
    try:
        return list(read_medrbench(file, data))
    except CaseFileError as exc:
        raise TaskFileError(str(exc)) from None


def read_all(path: str | Path) -> list[Task]:
    """Every task under `path` (`sample` = the packaged set), ids unique per dataset."""
    out: list[Task] = []
    seen: dict[str, Path] = {}
    for file in task_files(task_path(path)):
        for task in read_file(file):
            if task.key in seen:
                raise TaskFileError(f"{file}: task {task.qid!r} of dataset {task.dataset!r} is also in "
                                    f"{seen[task.key]}. Keep one copy of each file in the folder")
            seen[task.key] = file
            out.append(task)
    return out


def question_of(task: Task) -> Question:
    return task.question()


def _stamp(path: Path) -> tuple[tuple[str, float], ...]:
    files = task_files(path)
    return tuple((str(f), f.stat().st_mtime) for f in files)


@lru_cache(maxsize=8)
def _index(path: str, stamp: tuple[tuple[str, float], ...]) -> dict[str, Task]:
    return {t.key: t for t in read_all(path)}


def find_task(rubric_file: str | list[str], question: Question) -> Task | None:
    """The grading key of `question` under `rubric_file` (a file or folder, or several: the free-text
    parts of a benchmark suite, each holding its own benchmark), None when none holds it."""
    for value in [rubric_file] if isinstance(rubric_file, str) else rubric_file:
        path = task_path(value)
        task = _index(str(path), _stamp(path)).get(question.key)
        if task is not None:
            return task
    return None
