"""The rubric grader of free-text tasks, and the task files it reads (HealthBench-style rubrics).

A task is a conversation plus rubric items `{criterion, points, tags}`; points may be negative (an
undesirable behaviour). The runner sees a task as a `Question` with no options and no gold (the
dataset loader, `experiments/run/freetext.py`), so the rubric never leaves the task file and this
module: no pathway, verifier or responder sees it. The grader (an LLM judge; `grader_model`, else
the backbone) marks which items a response meets in one call; the score is the points of met items
over the sum of positive points, clipped to [0, 1] (HealthBench's rule).

Why the task parser sits here and not with the dataset loaders: the CLEAR pipeline looks up a
question's rubric from `settings.rubric_file` when it grades, and agents never import from
experiments. The team-written sample set ships beside it (`grader.sample_tasks.jsonl`).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from medpanel.agents.evidence import quote_block
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts
from medpanel.agents.types import Question
from medpanel.inputs import InputFileError, read_input_text

PROMPTS = Prompts(__name__)

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
    return Path(str(resources.files("medpanel.agents.clear.roles").joinpath("grader.sample_tasks.jsonl")))


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
        dataset = raw.get("dataset", file.stem)
        if not isinstance(dataset, str) or not dataset.strip():
            raise TaskFileError(f"{where}: dataset: {dataset!r} is not a subset name. Name it with a non-empty "
                                "string, or drop the field")
        prompt = raw.get("prompt")
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        try:
            task = FreeTextTask.model_validate({"dataset": dataset.strip(), "qid": str(qid).strip(),
                                                "prompt": prompt, "rubrics": raw.get("rubrics")})
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


@lru_cache(maxsize=8)
def _index(path: str, mtime: float) -> dict[str, FreeTextTask]:
    return {t.key: t for t in read_tasks(path)}


def find_task(rubric_file: str, question: Question) -> FreeTextTask | None:
    file = task_path(rubric_file)
    return _index(str(file), file.stat().st_mtime).get(question.key)


class RubricGrade(BaseModel):
    met: list[int] = Field(description="Numbers of the rubric items the response meets.")


def rubric_score(items: list[RubricItem], met: set[int]) -> float:
    """Points of met items (1-based numbers) over the positive points, clipped to [0, 1]."""
    possible = sum(i.points for i in items if i.points > 0)
    if possible <= 0:
        return 0.0
    got = sum(item.points for n, item in enumerate(items, 1) if n in met)
    return min(1.0, max(0.0, got / possible))


async def grade(session: QuestionSession, task: FreeTextTask, response: str) -> dict[str, Any]:
    grader = RoleAgent(session, name="grader", role="grader", system_message=PROMPTS.render("system"))
    items = "\n".join(f"{n}. {item.criterion}" for n, item in enumerate(task.rubrics, 1))
    prompt = PROMPTS.render("request", conversation=task.text(), response=quote_block("response", response),
                    items=items, n=len(task.rubrics))
    parsed = await grader.speak(prompt, RubricGrade, step="grade")
    if parsed is None:
        return {"valid": False, "score": None, "model": session.spec.model_name}
    met = {n for n in parsed.met if 1 <= n <= len(task.rubrics)}
    return {"valid": True, "score": round(rubric_score(task.rubrics, met), 4), "met": sorted(met),
            "points_possible": sum(i.points for i in task.rubrics if i.points > 0),
            "points_met": sum(i.points for n, i in enumerate(task.rubrics, 1) if n in met),
            "model": session.spec.model_name}
