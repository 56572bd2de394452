"""A condition as a pipeline will run it: the typed plan `Pipeline.plan` decodes once per condition,
and `PlanError`, the condition it cannot run.

It sits in the data-model room, below the pipelines, so the runner, the records and the channels
read a plan without importing the pipeline contract.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from medpanel.agents.types import flag_on


class PlanError(ValueError):
    """A condition the pipeline cannot run as written; `field` names the scenario key to fix."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class ConditionPlan(BaseModel):
    """One condition as the pipeline will run it. Pipelines extend it with typed, decoded fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    slug: str
    flags: dict[str, int | str] = {}
    """The condition's flags as the scenario gave them (`variant` among them)."""
    variant: str | None = None

    def on(self, name: str) -> bool:
        return flag_on(self.flags, name)
