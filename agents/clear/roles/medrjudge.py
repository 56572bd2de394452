"""MedRBench's outcome evaluator, re-implemented: one grader call per case judges the response
correct or wrong against the case's reference answer.

The benchmark's evaluator (`src/Evaluation/metrics/outcome_accuracy_eval.py`, CC BY-SA) asks an
LLM whether the predicted diagnosis matches the reference (aliases and synonyms count; extra
complications do not make it wrong) and, for a treatment plan, whether it matches the reference or
is supported as appropriate by additional information. The prompts here say the same rules in our
own words (the licence's share-alike would otherwise reach them). One difference, documented in
docs/integrations-hf.md: the benchmark's treatment judge reads three web-search results found from
the case; this judge reads the case summary and the published treatment-planning analysis instead,
so grading never searches and is the same on every run.

A case scores 1 (correct) or 0; a stage's score is the percentage correct, and the overall score
pools the cases of both stages (`agents/clear/table3.py`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from medpanel.agents.clear.medrbench import MedRCase
from medpanel.agents.clear.roles.grader import data_block
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts

PROMPTS = Prompts(__name__)


class OutcomeJudgement(BaseModel):
    correct: bool = Field(description="true if the predicted answer is correct.")
    explanation: str = Field(default="", description="One sentence.")


def judge_request(case: MedRCase, response: str) -> str:
    """The grader's request: the prediction, the reference and (treatment) the supporting information."""
    support = f"Case summary:\n{case.summary.strip()}\n\nTreatment planning analysis:\n{case.analysis.strip()}"
    return PROMPTS.render(case.stage, prediction=data_block("prediction", response), reference=case.reference.strip(),
                          support=support)


async def grade_case(session: QuestionSession, case: MedRCase, response: str) -> dict[str, Any]:
    grader = RoleAgent(session, name="grader", role="grader", system_message=PROMPTS.render("system"))
    parsed = await grader.speak(judge_request(case, response), OutcomeJudgement, step=f"medrbench_{case.stage}")
    if parsed is None:
        return {"valid": False, "score": None, "kind": "medrbench", "model": session.spec.model_name}
    return {"valid": True, "kind": "medrbench", "stage": case.stage, "correct": parsed.correct,
            "score": 1.0 if parsed.correct else 0.0, "explanation": parsed.explanation,
            "model": session.spec.model_name}
