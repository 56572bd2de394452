"""The base of every pipeline's `settings:` block (outside `pipelines/` so roles can extend it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class PipelineSettings(BaseModel):
    """Unknown keys are refused, so a misspelt setting fails before any model call."""

    model_config = ConfigDict(extra="forbid")
