"""Free-text task files of rubric tasks (HealthBench-style rubrics): the task, its rubric, the parser.

A task is a conversation plus rubric items `{criterion, points, tags}`; points may be negative (an
undesirable behaviour). The runner sees a task as a `Question` with no options and no gold (the
dataset loader, `experiments/run/sources/freetext.py`), so the rubric stays in the task file: only a
grader reads it (CLEAR's, `roles/grader.py`), never an agent that answers.

HealthBench's own rows (`prompt_id`, `prompt`, `rubrics`, `example_tags`, `ideal_completions_data`)
are task lines as they are: their dataset is `healthbench`, and the physicians' ideal completions
are never read.

Why here, below the methods and the run room: the run room reads these files as questions and a
method's grader reads them as grading keys, and neither imports the other. The team-written sample
set ships beside it (`tasks.sample.jsonl`).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from medpanel.agents.types import Question
from medpanel.inputs import InputFileError, read_input_text

HEALTHBENCH = "healthbench"
"""The dataset name of HealthBench's rows (Table 3's column)."""
PUBLISHED = ("HealthBench is published by OpenAI (simple-evals): "
             "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/hard_2025-05-08-21-00-10.jsonl "
             "(Hard, 1,000 conversations; also on Hugging Face as openai/healthbench)")
"""Said when a free-text path does not exist: where HealthBench's files are published."""

SAMPLE_FILE = "tasks.sample.jsonl"
"""The packaged team-written set, beside this module."""
SAMPLE_RUBRICS = "sample"
"""`rubric_file: sample` (and a free-text dataset's `path: sample`) names the packaged team-written set."""


class RubricItem(BaseModel):
    criterion: str = Field(min_length=1)
    points: float
    tags: list[str] = Field(default_factory=list)


class Turn(BaseModel):
    role: str
    content: str


class FreeTextTask(BaseModel):
    dataset: str
    qid: str
    prompt: list[Turn] = Field(min_length=1)
    rubrics: list[RubricItem] = Field(min_length=1)
    example_tags: list[str] = Field(default_factory=list)
    """HealthBench's example-level tags (`theme:...`, `physician_agreed_category:...`)."""

    @property
    def key(self) -> str:
        return f"{self.dataset}__{self.qid}"

    def text(self) -> str:
        """The conversation as the agents see it."""
        if len(self.prompt) == 1:
            return self.prompt[0].content.strip()
        lines = [f"[{t.role}] {t.content.strip()}" for t in self.prompt]
        return "Conversation so far:\n" + "\n".join(lines)

    def question(self) -> Question:
        return Question(dataset=self.dataset, qid=self.qid, text=self.text(), options={}, gold=())


class TaskFileError(ValueError):
    """A malformed task file; the message names file:line and the fix."""


def sample_path() -> Path:
    # The package's own name (not written out): the file travels with this module.
    return Path(str(resources.files(__package__ or "").joinpath(SAMPLE_FILE)))


def task_path(value: str | Path) -> Path:
    return sample_path() if str(value) == SAMPLE_RUBRICS else Path(value).expanduser()


def read_tasks(path: str | Path) -> list[FreeTextTask]:
    """Tasks of a JSONL file: `prompt` (a string or a list of {role, content}), `rubrics`, an id
    (`prompt_id`, `id` or `realidx`) and optionally `dataset` (else the file's stem)."""
    file = task_path(path)
    tasks: list[FreeTextTask] = []
    seen: set[str] = set()
    try:  # checked first (a FIFO or a device is refused before a byte is read), bounded, UTF-8
        text = read_input_text(file, what="free-text task file", fix="Give a JSONL file of free-text tasks")
    except InputFileError as exc:
        raise TaskFileError(str(exc)) from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{file}:{lineno}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TaskFileError(f"{where}: not valid JSON ({exc.msg}). Write one object per line") from None
        if not isinstance(raw, dict):
            raise TaskFileError(f"{where}: expected a JSON object")
        key = next((k for k in ("prompt_id", "id", "realidx") if k in raw), "id")
        qid = raw.get(key)
        # Ids and subsets are text as given (an integer id too): a null or an object is never str()-ed.
        if isinstance(qid, bool) or not isinstance(qid, str | int) or str(qid).strip() == "":
            raise TaskFileError(f"{where}: {key}: {qid!r} is not an id. Give prompt_id, id or realidx as a "
                                "non-empty string or an integer")
        # HealthBench's rows name no dataset; their example_tags say whose layout they are.
        dataset = raw.get("dataset", HEALTHBENCH if "example_tags" in raw else file.stem)
        if not isinstance(dataset, str) or not dataset.strip():
            raise TaskFileError(f"{where}: dataset: {dataset!r} is not a subset name. Name it with a non-empty "
                                "string, or drop the field")
        prompt = raw.get("prompt")
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        try:
            task = FreeTextTask.model_validate({"dataset": dataset.strip(), "qid": str(qid).strip(),
                                                "prompt": prompt, "rubrics": raw.get("rubrics"),
                                                "example_tags": raw.get("example_tags") or []})
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            raise TaskFileError(f"{where}: {loc}: {err['msg']}. Each task needs prompt and rubrics "
                                "[{criterion, points}]") from None
        blank = next((i for i, t in enumerate(task.prompt) if not t.content.strip()), None)
        if blank is not None:  # a blank turn would reach the agents as an empty message
            raise TaskFileError(f"{where}: prompt.{blank}.content: the turn is empty. Give every turn its words")
        if task.key in seen:
            raise TaskFileError(f"{where}: duplicate id {task.qid!r} in dataset {task.dataset!r}. Give every task "
                                "a unique id")
        seen.add(task.key)
        tasks.append(task)
    return tasks
