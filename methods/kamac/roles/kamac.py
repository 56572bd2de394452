"""KAMAC's roles (knowledge-gap-driven recruitment, arXiv 2509.14998): the recruiter, the
specialists (assessment, debate, gap check, final answer), the assistant who sifts the gap reports,
and the moderator. Reply models and prompts
(`kamac.<part>.md`, written for medpanel; the GPL original was read for behaviour only)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from medpanel.agents.model.structured import Slots
from medpanel.agents.prompting import Prompts

PROMPTS = Prompts(__name__)


class Gap(BaseModel):
    gap: bool = Field(description="true if the panel lacks knowledge the question needs.")
    expert: str = Field(description="The kind of specialist who would have it (empty if no gap).")
    reason: str = Field(description="What is missing (empty if no gap).")


class GapSummary(BaseModel):
    recommendations: str = Field(description="The distinct, specific specialist recommendations.")


class GapRecruit(Slots):
    """The gap recruiter's reply: how many to recruit, then up to `k` specialties (`slots`)."""

    count: int


def gap_recruit_model(k: int) -> type[GapRecruit]:
    # Integers, not digit strings: a model writes `"count": 1` in JSON.
    fields: dict[str, Any] = {"count": (Literal[tuple(range(k + 1))],
                                        Field(description="How many specialists to recruit (0 to skip)."))}
    for i in range(1, k + 1):
        fields[f"expert_{i}"] = (str, Field(description="A specialty, or empty."))
    return create_model("GapRecruit", __base__=GapRecruit, **fields)
