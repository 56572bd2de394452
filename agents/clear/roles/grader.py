"""The rubric grader of free-text tasks, and the task files it reads (HealthBench-style rubrics).

A task is a conversation plus rubric items `{criterion, points, tags}`; points may be negative (an
undesirable behaviour). The runner sees a task as a `Question` with no options and no gold (the
dataset loader, `experiments/run/sources/freetext.py`), so the rubric never leaves the task file and this
module: no pathway, verifier or responder sees it. The grader (an LLM judge; `grader_model`, else
the backbone) judges each rubric item met or not in a call of its own, shown the whole conversation
with the response as its last turn and the one item with its points, as HealthBench's published
grader does (simple-evals). The example's score and its tag scores are `healthbench.py`'s; the
grader sees neither the condition nor the pipeline that wrote the response.

HealthBench's own rows (`prompt_id`, `prompt`, `rubrics`, `example_tags`, `ideal_completions_data`)
are task lines as they are: their dataset is `healthbench`, and the physicians' ideal completions
are never read.

Why the task parser sits here and not with the dataset loaders: the CLEAR pipeline looks up a
question's rubric from `settings.rubric_file` when it grades, and agents never import from
experiments. The team-written sample set ships beside it (`grader.sample_tasks.jsonl`).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from medpanel.agents.clear.healthbench import example_metrics, points_ratio
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts
from medpanel.agents.types import Question
from medpanel.inputs import InputFileError, read_input_text

PROMPTS = Prompts(__name__)

HEALTHBENCH = "healthbench"
"""The dataset name of HealthBench's rows (Table 3's column)."""

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


class CriterionGrade(BaseModel):
    explanation: str = Field(default="", description="Why the reply does or does not meet the rubric item.")
    criteria_met: bool = Field(description="true only if the reply meets every part of the rubric item.")


def conversation_with(task: FreeTextTask, response: str) -> str:
    """The whole conversation, the response as its last assistant turn (`role: content` per turn)."""
    turns = [*((t.role, t.content.strip()) for t in task.prompt), ("assistant", response.strip())]
    return "\n\n".join(f"{role}: {content}" for role, content in turns)


def item_request(task: FreeTextTask, n: int, response: str) -> str:
    item = task.rubrics[n - 1]
    return PROMPTS.render("request", conversation=data_block("conversation", conversation_with(task, response)),
                          item=f"[{item.points:g}] {item.criterion}")


def data_block(tag: str, body: str) -> str:
    """Quoted text in tags; a closing tag inside is neutralised so the text cannot end the block."""
    return f"<{tag}>\n{body.replace(f'</{tag}>', f'</ {tag}>')}\n</{tag}>"


def rubric_score(items: list[RubricItem], met: set[int]) -> float:
    """Points of met items (1-based numbers) over the positive points: HealthBench's example score,
    not clipped (a met negative item can take it below 0; the mean over examples is clipped)."""
    score = points_ratio(items, [n in met for n in range(1, len(items) + 1)])
    return 0.0 if score is None else score


async def grade(session: QuestionSession, task: FreeTextTask, response: str) -> dict[str, Any]:
    """Each rubric item judged in its own call; the decisions, the score and the tag scores."""
    grader = RoleAgent(session, name="grader", role="grader", system_message=PROMPTS.render("system"))
    decisions: list[dict[str, Any]] = []
    for n, item in enumerate(task.rubrics, 1):
        # consult: each item is judged on a fresh context, never beside another item's grade
        parsed = await grader.consult(item_request(task, n, response), CriterionGrade, step="grade", turn=n)
        if parsed is None:
            return {"valid": False, "score": None, "kind": "rubric", "model": session.spec.model_name,
                    "items": decisions}
        decisions.append({"n": n, "points": item.points, "met": parsed.criteria_met,
                          "explanation": parsed.explanation})
    met = [d["met"] for d in decisions]
    metrics = example_metrics(task.rubrics, met, task.example_tags)
    return {"valid": True, "kind": "rubric", "score": round(metrics["overall_score"], 6),
            "met": [d["n"] for d in decisions if d["met"]],
            "points_possible": sum(i.points for i in task.rubrics if i.points > 0),
            "points_met": sum(i.points for i, m in zip(task.rubrics, met, strict=True) if m),
            "tags": {k: round(v, 6) for k, v in metrics.items() if k != "overall_score"},
            "items": decisions, "model": session.spec.model_name}
