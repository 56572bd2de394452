"""MedAgents' roles (Tang et al., 2024): the domain classifier, the domain experts (question and
option analysts, voters), the report editor and the decision maker. Their reply models and prompts
(`medagents.<part>.md`, written for medpanel, not taken from the original)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from medpanel.agents.prompting import Prompts

PROMPTS = Prompts(__name__)


class Report(BaseModel):
    key_knowledge: str = Field(description="The key knowledge the analyses establish.")
    total_analysis: str = Field(description="The overall analysis of the question and options.")


class Revised(BaseModel):
    total_analysis: str = Field(description="The revised analysis.")


class Vote(BaseModel):
    """The short yes/no vote (the advice is its own call, asked only after a no)."""

    agree: bool = Field(description="true (yes) if your opinion is consistent with the report.")


class Advice(BaseModel):
    revisions: str = Field(description="The revisions you propose.")


class Analysis(BaseModel):
    # No length asked for: the codes ask for the analysis alone (the original caps its tokens at 300).
    analysis: str = Field(description="Your analysis.")


def report_text(stem: str, options: str, total_analysis: str) -> str:
    """The report as the voters and the decision maker read it. MedAgentsBench's cleaning step (and
    the original's) keeps the question, the options and the total analysis: its test for a
    key-knowledge part never matches, so that part is dropped from every report."""
    return f"{stem}\n\nOptions:\n{options}\n\nTotal analysis: {total_analysis}"
