"""Pipelines compose roles into a method. Importing this package registers the built-in ones."""

from medpanel.agents.pipelines import baselines, calibrated, clear, generalist  # noqa: F401  (registration)
from medpanel.agents.pipelines.base import PIPELINES, Outcome, PipelineSettings, get_pipeline
from medpanel.agents.pipelines.panel import pipeline  # noqa: F401  (registration)

__all__ = ["PIPELINES", "Outcome", "PipelineSettings", "get_pipeline"]
