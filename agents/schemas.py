"""Reply models of the supervisory roles (the answer models come from `structured.answer_model`, one per option set)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

GapType = Literal[
    "none",
    "logical_inconsistency",
    "missing_differential",
    "insufficient_evidence",
    "unresolved_option_conflict",
    "missing_expertise",
]


class Critique(BaseModel):
    """The Challenger's structured review of a reasoning trace (the paper's (j_t, delta_t))."""

    material_weakness: bool = Field(description="true if the reasoning has a material weakness.")
    gap_type: GapType = Field(description="The kind of weakness, or none.")
    challenge: str = Field(description="One targeted challenge to the team; never the answer.")


class Specialist(BaseModel):
    role: str = Field(description="Short specialty label, e.g. Cardiologist.")
    expertise: str = Field(description="One line on the expertise this role brings.")

    @field_validator("role")
    @classmethod
    def _real_role(cls, v: str) -> str:
        # Small models copy the format hint's "<role>" slot verbatim; that is no specialty, so the
        # reply is invalid and gets the re-ask instead of seating a "<role>" on the panel.
        label = v.strip()
        if not label or (label.startswith("<") and label.endswith(">")):
            raise ValueError("write a real medical specialty (e.g. Cardiologist), not the placeholder")
        return label


class TeamChoice(BaseModel):
    specialists: list[Specialist] = Field(min_length=1, description="The chosen specialists.")


class RecruitCheck(BaseModel):
    """One agent's answer to: is a perspective missing from the panel?"""

    needed: bool = Field(description="true if a missing specialty would change the analysis.")
    specialty: str = Field(default="", description="The missing specialty, or empty.")
    reason: str = Field(default="", description="One sentence on why.")
