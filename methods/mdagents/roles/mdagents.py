"""MDAgents' roles (Kim et al., NeurIPS 2024): the complexity judge, the solo expert, the recruiter,
the team experts, the assistant, the moderator, the ICT teams and the final decision maker. Their
reply models and prompts (`mdagents.<part>.md`, written for medpanel, not taken from the original)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, create_model

from medpanel.agents.model.structured import Slots
from medpanel.agents.prompting import Prompts

PROMPTS = Prompts(__name__)

Complexity = Literal["low", "moderate", "high"]


class Triage(BaseModel):
    reasoning: str = Field(description="Your reasoning.")  # the code asks for no length
    complexity: Complexity = Field(description="low, moderate or high.")


class Rationale(BaseModel):
    rationale: str = Field(description="One or two sentences.")


class Text(BaseModel):
    # No length asked for: the code's ICT replies are free text of any length.
    text: str = Field(description="Your reply.")


class TeamSummary(BaseModel):
    key_knowledge: str = Field(description="The key knowledge the team has.")
    total_analysis: str = Field(description="The overall analysis so far.")


class TeamRecruit(Slots):
    """The MDT recruiter's reply: the experts' specialties (`slots`) and the number of the lead."""

    if TYPE_CHECKING:
        # Declared by `recruit_model`, after the slots: a field declared here would come first in
        # the schema the recruiter is shown.
        lead: int


def recruit_model(n: int) -> type[TeamRecruit]:
    fields: dict[str, Any] = {f"expert_{i}": (str, Field(description="A specialty.")) for i in range(1, n + 1)}
    fields["lead"] = (Literal[tuple(range(1, n + 1))],
                      Field(description="The number of the expert who leads the team."))
    return create_model("TeamRecruit", __base__=TeamRecruit, **fields)


class TeamsRecruit(BaseModel):
    """The ICT recruiter's reply: per team a `team_<g>_name` field, then its `team_<g>_member_<m>` fields."""

    @property
    def teams(self) -> list[tuple[str, list[str]]]:
        """(name, member specialties) per team, in order (read in the fields' order, which `ict_model` fixes)."""
        teams: list[tuple[str, list[str]]] = []
        for key, value in self:
            if key.endswith("_name"):
                teams.append((str(value), []))
            else:
                teams[-1][1].append(str(value))
        return teams


def ict_model(groups: int, members: int) -> type[TeamsRecruit]:
    fields: dict[str, Any] = {}
    for g in range(1, groups + 1):
        fields[f"team_{g}_name"] = (str, Field(description="The team's name."))
        for m in range(1, members + 1):
            fields[f"team_{g}_member_{m}"] = (str, Field(description="A clinician's specialty."))
    return create_model("TeamsRecruit", __base__=TeamsRecruit, **fields)
