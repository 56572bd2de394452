"""Free-text tasks as run questions: the `freetext` dataset source (CLEAR's free-text benchmarks).

`dataset.path` is a file or a folder (`agents/freetext/files.py`): JSONL files of rubric tasks
(HealthBench's published layout, and the packaged team-written set, `path: sample` or no path) and
MedRBench's published JSON case files. A task becomes a `Question` with no options and no gold, so
the runner, the store and the transcripts handle it unchanged; the rubric or reference answer stays
in the file and only the pipeline's grader reads it (`settings.rubric_file`, the same path).
Nothing is downloaded: a missing path is one line naming where each benchmark is published.
"""

from __future__ import annotations

import random
from pathlib import Path

from medpanel.agents.freetext.files import read_all
from medpanel.agents.freetext.tasks import SAMPLE_RUBRICS, TaskFileError, sample_path
from medpanel.agents.types import Question
from medpanel.experiments.errors import UserError


def resolve_path(path: str | Path | None, base_dir: Path | None) -> Path:
    if path is None or str(path) == SAMPLE_RUBRICS:
        return sample_path()
    p = Path(path).expanduser()
    return p if p.is_absolute() else (base_dir or Path.cwd()) / p


def load_freetext(path: str | Path | None, subsets: list[str] | None, limit: int | None, seed: int, *,
                  base_dir: Path | None = None) -> list[Question]:
    """Questions of a free-text file or folder, grouped by dataset, `limit` per dataset (seeded sample)."""
    file = resolve_path(path, base_dir)
    try:
        tasks = read_all(file)
    except TaskFileError as exc:
        raise UserError(f"{exc}", field="dataset.path") from None
    groups: dict[str, list[Question]] = {}
    for task in tasks:
        groups.setdefault(task.dataset, []).append(task.question())
    wanted = list(groups) if subsets is None else list(dict.fromkeys(subsets))
    missing = [s for s in wanted if s not in groups]
    if missing:
        raise UserError(f"unknown subset(s) {', '.join(missing)}. Available subsets: {', '.join(groups)}",
                        file=str(file), field="dataset.subsets")
    out: list[Question] = []
    for name in wanted:
        questions = groups[name]
        if limit is not None and limit < len(questions):
            picked = set(random.Random(seed).sample(range(len(questions)), limit))
            questions = [q for i, q in enumerate(questions) if i in picked]
        out.extend(questions)
    return out
