"""Where a scenario's `pipeline:` comes from: a built-in name, a registered one, `module:Class`, or an
installed package's entry point in the `medpanel.pipelines` group (see `medpanel.plugins`)."""

from __future__ import annotations

from collections.abc import Callable

from medpanel import plugins
from medpanel.agents.pipelines.base import Pipeline, SomePipeline
from medpanel.agents.pipelines.baselines import BaselinePipeline
from medpanel.agents.pipelines.benchmark import BenchmarkPipeline
from medpanel.agents.pipelines.calibrated import CalibratedPipeline
from medpanel.agents.pipelines.clear import ClearPipeline
from medpanel.agents.pipelines.generalist import GeneralistPipeline
from medpanel.agents.pipelines.kamac import KamacPipeline
from medpanel.agents.pipelines.mdagents import MDAgentsPipeline
from medpanel.agents.pipelines.medagents import MedAgentsPipeline
from medpanel.agents.pipelines.multiagent import MultiAgentPipeline
from medpanel.agents.pipelines.panel.pipeline import PanelPipeline

ENTRY_POINTS = "medpanel.pipelines"

Factory = Callable[[], SomePipeline]

PIPELINES: dict[str, Factory] = {
    "panel": PanelPipeline,  # first: a report of a record that names no pipeline shows the panel's tables first
    "generalist": GeneralistPipeline,
    "calibrated": CalibratedPipeline,
    "clear": ClearPipeline,
    "baseline": BaselinePipeline,
    "direct": lambda: BaselinePipeline("direct"),
    "cot": lambda: BaselinePipeline("cot"),
    "sc": lambda: BaselinePipeline("sc"),
    # The benchmark context: every single-model Table 7 method as a variant of `benchmark`, and each
    # as a pipeline of its own. `zero-shot` sends `direct`'s prompt; `cot-sc` sends `sc`'s samples and
    # then an aggregation call (docs/methods/benchmark.md).
    "benchmark": BenchmarkPipeline,
    "zero-shot": lambda: BenchmarkPipeline("zero-shot"),
    "few-shot": lambda: BenchmarkPipeline("few-shot"),
    "cot-sc": lambda: BenchmarkPipeline("cot-sc"),
    "multipersona": lambda: BenchmarkPipeline("multipersona"),
    "self-refine": lambda: BenchmarkPipeline("self-refine"),
    "medprompt": lambda: BenchmarkPipeline("medprompt"),
    # The published multi-agent methods, and `multiagent` holding the three as variants.
    "medagents": MedAgentsPipeline,
    "mdagents": MDAgentsPipeline,
    "kamac": KamacPipeline,
    "multiagent": MultiAgentPipeline,
}
"""Name -> factory. `register` adds to it; tests replace an entry to inject fakes."""


class UnknownPipeline(LookupError):
    """The message is one line naming what is known and the fix."""


def register(name: str) -> Callable[[Factory], Factory]:
    """`@register("my-panel")` on a `Pipeline` subclass (or a factory) makes `pipeline: my-panel` work."""

    def deco(factory: Factory) -> Factory:
        PIPELINES[name] = factory
        return factory

    return deco


def known() -> list[str]:
    return sorted({*PIPELINES, *plugins.entry_point_names(ENTRY_POINTS)})


def get_pipeline(name: str) -> SomePipeline:
    """A fresh instance of the pipeline `name` names. One lookup per run: the runner keeps it."""
    factory = PIPELINES.get(name)
    if factory is None:
        try:
            loaded = plugins.load(name, ENTRY_POINTS, "pipeline")
        except plugins.PluginError as exc:
            raise UnknownPipeline(str(exc)) from None
        if loaded is None:
            raise UnknownPipeline(f"unknown pipeline {name!r}. Use one of: {', '.join(known())}, or "
                                  "module:ClassName for your own")
        if ":" in name and not isinstance(loaded, Pipeline) and not (
                isinstance(loaded, type) and issubclass(loaded, Pipeline)):
            # Checked before anything is called: `os:system` must not be run to find out.
            raise UnknownPipeline(f"{name!r} names {type(loaded).__name__} {getattr(loaded, '__name__', '')!s}, "
                                  "not a medpanel pipeline: give module:ClassName of a subclass of "
                                  "medpanel.Pipeline (README: your own pipeline)")
        factory = loaded  # type: ignore[assignment]
    pipeline = factory() if callable(factory) else factory
    if not isinstance(pipeline, Pipeline):
        raise UnknownPipeline(f"{name!r} is not a medpanel pipeline: subclass medpanel.Pipeline (docs/extending.md: "
                              "your own pipeline)")
    return pipeline
