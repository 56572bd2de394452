"""The rubric grader of free-text tasks (HealthBench-style rubrics; the task files are `tasks.py`'s).

The runner sees a task as a `Question` with no options and no gold (the dataset loader,
`experiments/run/sources/freetext.py`), so the rubric never leaves the task file and this module:
no pathway, verifier or responder sees it. The grader (an LLM judge; `grader_model`, else
the backbone) judges each rubric item met or not in a call of its own, shown the whole conversation
with the response as its last turn and the one item with its points, as HealthBench's published
grader does (simple-evals). The example's score and its tag scores are `healthbench.py`'s; the
grader sees neither the condition nor the pipeline that wrote the response.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from medpanel.agents.freetext.tasks import FreeTextTask, RubricItem
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts
from medpanel.methods.clear.healthbench import example_metrics, points_ratio

PROMPTS = Prompts(__name__)

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
