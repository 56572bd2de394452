"""Pipelines compose roles into a method. Importing this package registers the built-in ones."""

from medpanel.agents.pipelines import baselines, calibrated, clear, generalist, panel  # noqa: F401  (registration)
from medpanel.agents.pipelines.base import PIPELINES, Outcome, PipelineSettings, get_pipeline

__all__ = ["PIPELINES", "Outcome", "PipelineSettings", "get_pipeline"]
