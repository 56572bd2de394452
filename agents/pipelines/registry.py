"""Where a scenario's `pipeline:` comes from: a registered name, an installed package's entry point in
the `medpanel.pipelines` group (medpanel's own methods among them, see `medpanel.plugins`), or
`module:Class`."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib import metadata, util

from medpanel import plugins
from medpanel.agents.pipelines.base import Pipeline, SomePipeline

ENTRY_POINTS = "medpanel.pipelines"
OWN = "medpanel."
"""Where medpanel's own pipelines live: registered through the same entry-point group as a user's method
(pyproject.toml), so the run room imports no method."""
FIRST = "panel"
"""A report of a record that names no pipeline reads every built-in pipeline's tables, the panel's first
(as it always has): its tables come before the others' in the report."""

Factory = Callable[[], SomePipeline]

PIPELINES: dict[str, Factory] = {}
"""Name -> factory of the pipelines `register` adds (before the entry points); tests replace an entry to
inject fakes."""


class UnknownPipeline(LookupError):
    """The message is one line naming what is known and the fix."""


def register(name: str) -> Callable[[Factory], Factory]:
    """`@register("my-panel")` on a `Pipeline` subclass (or a factory) makes `pipeline: my-panel` work."""

    def deco(factory: Factory) -> Factory:
        PIPELINES[name] = factory
        return factory

    return deco


@cache
def own() -> dict[str, metadata.EntryPoint]:
    """medpanel's own pipelines: name -> entry point, read once per process."""
    try:
        entries = plugins.installed(ENTRY_POINTS, OWN, "pipelines")
    except plugins.PluginError as exc:
        raise UnknownPipeline(str(exc)) from None
    return {e.name: e for e in entries if e.value.startswith(OWN)}


def known() -> list[str]:
    return sorted({*PIPELINES, *own(), *plugins.entry_point_names(ENTRY_POINTS)})


def built_in() -> list[str]:
    """The registered names and medpanel's own, the panel's first (`FIRST`), then by name: the order a
    report of a record that names no pipeline reads their tables in."""
    return sorted({*PIPELINES, *own()}, key=lambda name: (name != FIRST, name))


SHARED_PROMPTS = ("medpanel.agents.roles",)
"""The prompt package of the roles two or more methods use (CLEAR's, which the panel's CLEAR channel
asks too, are CLEAR's room's: `methods/clear/roles/`)."""


def prompt_packages() -> list[str]:
    """Every package of role prompt files: the shared ones, then each of medpanel's own methods' roles
    (`methods/<method>/roles/`, found beside its pipeline's entry point). A scenario's `prompts:` keys
    (`kamac.talk`) reach them all alike, and the run room names no method."""
    found = {f"{entry.module.rpartition('.')[0]}.roles" for entry in own().values()}
    return [*SHARED_PROMPTS, *sorted(p for p in found - set(SHARED_PROMPTS) if util.find_spec(p) is not None)]


def get_pipeline(name: str) -> SomePipeline:
    """A fresh instance of the pipeline `name` names. One lookup per run: the runner keeps it."""
    factory = PIPELINES.get(name)
    if factory is None and name in own():
        try:
            factory = plugins.load_entry(own()[name], ENTRY_POINTS, "pipeline")  # type: ignore[assignment]
        except plugins.PluginError as exc:
            raise UnknownPipeline(str(exc)) from None
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
