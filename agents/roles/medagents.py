"""MedAgents' roles (Tang et al., 2024): the domain classifier, the domain experts (question and
option analysts, voters), the report editor and the decision maker. Their reply models and prompts
(`medagents.<part>.md`, written for medpanel, not taken from the original)."""

from __future__ import annotations

from pydantic import BaseModel, Field, create_model

from medpanel.agents.prompting import Prompts

PROMPTS = Prompts(__name__)


def report_model() -> type[BaseModel]:
    return create_model("Report",
                        key_knowledge=(str, Field(description="The key knowledge the analyses establish.")),
                        total_analysis=(str, Field(description="The overall analysis of the question and options.")))


class Vote(BaseModel):
    agree: bool = Field(description="true if you agree with the report as it stands.")
    advice: str = Field(description="What should change (empty if you agree).")


class Analysis(BaseModel):
    analysis: str = Field(description="Your analysis, at most 5 sentences.")


def report_text(report: BaseModel) -> str:
    return (f"Key knowledge: {report.key_knowledge}\n"  # type: ignore[attr-defined]
            f"Total analysis: {report.total_analysis}")  # type: ignore[attr-defined]
