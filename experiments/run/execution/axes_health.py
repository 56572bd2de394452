"""Endpoint health per model (`models:`): a dead second endpoint stops the run like a dead only one.

`EndpointHealth` holds a session's suspect failures until some call has been answered. With several
models one live endpoint would vouch for a dead one, whose questions would all become error rows;
here each model has its own watch, keyed by the condition's label (and by the label of each call).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from medpanel.agents.types import TranscriptEvent
from medpanel.experiments.run.scenario.plan import Plan
from medpanel.experiments.run.tracking.health import EndpointHealth, Held


class ModelsHealth(EndpointHealth):
    """One `EndpointHealth` per model label, behind the interface the workers use."""

    def __init__(self, per: dict[str, EndpointHealth], label_of: Callable[[str], str | None]) -> None:
        first = next(iter(per.values()))
        super().__init__(first.spec, first.base_url)
        self.per = per
        self.label_of = label_of

    def on_event(self, event: TranscriptEvent) -> None:
        watch = self.per.get(str(event.data.get("model_label") or ""))
        if watch is not None:
            watch.on_event(event)

    def hold(self, held: Held) -> tuple[bool, str | None]:
        label = self.label_of(held.pair[0]) or ""
        watch = self.per.get(label)
        if watch is None:
            return super().hold(held)
        back, cause = watch.hold(held)
        return back, f"model {label}: {cause}" if cause is not None else None

    def take_committable(self) -> list[Held]:
        return [h for w in self.per.values() for h in w.take_committable()]

    def take_all(self) -> list[Held]:
        return [h for w in self.per.values() for h in w.take_all()]

    def verdict(self, held: list[Held]) -> str | None:
        groups: dict[str, list[Held]] = defaultdict(list)
        for h in held:
            groups[self.label_of(h.pair[0]) or ""].append(h)
        for label, group in groups.items():
            watch = self.per.get(label)
            verdict = watch.verdict(group) if watch is not None else None
            if verdict is not None:
                return f"model {label}: {verdict}"
        return None


def session_health(plan: Plan, base_url: str | None) -> EndpointHealth:
    """The run's endpoint watch: one per model when the scenario has `models:`."""
    axes = plan.axes
    if not axes.models:
        return EndpointHealth(plan.model_spec, base_url)
    per = {label: EndpointHealth(spec, base_url if spec.backend == "local" else None)
           for label, spec in axes.models.items()}
    return ModelsHealth(per, lambda slug: axes.cond_model.get(slug))
