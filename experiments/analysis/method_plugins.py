"""Where the methods' reports come from: the `medpanel.reports` entry-point group and `register`.

Two readers ask: the report (`methods.reports`, every hook of `MethodReport`) and the trajectories
(`stage_readers`, only `stages`), which the digests build before any table, so this module imports
neither the digests nor the report's types.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from medpanel import plugins

if TYPE_CHECKING:
    from medpanel.experiments.analysis.event_facts import EventFacts
    from medpanel.experiments.analysis.trajectory_types import Intervention, Stage

ENTRY_POINTS = "medpanel.reports"
OWN = "medpanel.methods."
"""Where medpanel's own methods' reports live (`methods/<method>/report.py`)."""


class StageReader(Protocol):
    """What the trajectories ask of a method (`MethodReport.stages`)."""

    @property
    def place(self) -> int: ...

    def stages(self, events: Sequence[EventFacts], gold: Sequence[str], scoring: str,
               scored: bool) -> tuple[str, list[Stage], list[Intervention]] | None: ...


_INSTALLED: list[tuple[str, StageReader]] = []
_REGISTERED: dict[str, StageReader] = {}


def register(name: str, report: StageReader) -> None:
    _REGISTERED[name] = report


def registered() -> list[tuple[str, StageReader]]:
    """(name, report) of every installed method (the entry points read once per process) and every
    registered one (a name registered again replaces it), by `place`, then name."""
    if not _INSTALLED:
        try:
            entries = plugins.installed(ENTRY_POINTS, OWN, "methods")
        except plugins.PluginError as exc:
            raise RuntimeError(str(exc)) from None
        _INSTALLED.extend((entry.name, entry.load()) for entry in entries)
    found = dict(_INSTALLED)
    found.update(_REGISTERED)
    return sorted(found.items(), key=lambda item: (getattr(item[1], "place", 0), item[0]))


def stage_readers() -> list[StageReader]:
    return [report for _name, report in registered()]
