"""MDAgents' roles (Kim et al., NeurIPS 2024): the complexity judge, the solo expert, the recruiter,
the team experts, the assistant, the moderator, the ICT teams and the final decision maker. Their
reply models and prompts (`mdagents.<part>.md`, written for medpanel, not taken from the original)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from medpanel.agents.prompting import Prompts

PROMPTS = Prompts(__name__)

Complexity = Literal["low", "moderate", "high"]


class Triage(BaseModel):
    reasoning: str = Field(description="Brief reasoning.")
    complexity: Complexity = Field(description="low, moderate or high.")


class Rationale(BaseModel):
    rationale: str = Field(description="One or two sentences.")


class Text(BaseModel):
    text: str = Field(description="Your reply, at most 5 sentences.")


def summary_model() -> type[BaseModel]:
    return create_model("TeamSummary",
                        key_knowledge=(str, Field(description="The key knowledge the team has.")),
                        total_analysis=(str, Field(description="The overall analysis so far.")))


def recruit_model(n: int) -> type[BaseModel]:
    fields: dict[str, Any] = {f"expert_{i}": (str, Field(description="A specialty.")) for i in range(1, n + 1)}
    fields["lead"] = (Literal[tuple(range(1, n + 1))],
                      Field(description="The number of the expert who leads the team."))
    return create_model("TeamRecruit", **fields)


def ict_model(groups: int, members: int) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for g in range(1, groups + 1):
        fields[f"team_{g}_name"] = (str, Field(description="The team's name."))
        for m in range(1, members + 1):
            fields[f"team_{g}_member_{m}"] = (str, Field(description="A clinician's specialty."))
    return create_model("TeamsRecruit", **fields)
