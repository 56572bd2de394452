"""The papers' protocol, and where a scenario (or a run made from one) departs from it.

Every run is held to the settings every paper fixes (the model's temperature 0 and seed 42, the
question sample's seed 42); each method's room adds the settings its own paper or published code
fixes, how it still differs from that code, and what differs by design (`MethodReport.deviations`,
`differences`, `closing`, in `methods/<method>/`; docs/methods/<method>.md gives each one with its
source). `deviations` compares a scenario's resolved values (the pipeline's defaults filled in) with
them. A shipped scenario that deviates says so in its `description` (a test holds every shipped
scenario to it), and every report header prints the deviations of the run it describes, `--set`
overrides included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines.registry import get_pipeline
from medpanel.experiments.analysis.methods import Deviation, ScenarioFacts, reports
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.rows import Row

__all__ = ["Deviation", "deviations", "facts_of", "protocol_line", "undeclared"]

DEFAULT_PIPELINE = str(Scenario.model_fields["pipeline"].default)
"""The pipeline of a scenario that names none."""


def _settings(pipeline: str, settings: dict[str, object]) -> dict[str, object]:
    """The pipeline's settings with its defaults filled in (unvalidatable settings: as written)."""
    try:
        model = get_pipeline(pipeline).settings_model
        return model.model_validate(settings).model_dump()
    except Exception:  # an unknown pipeline or bad settings are the scenario loader's to report
        return dict(settings)


def _conditions(scenario: dict[str, object]) -> list[dict[str, object]]:
    try:
        return [c.model_dump() for c in Scenario.model_validate(scenario).conditions()]
    except Exception:
        return []


def facts_of(scenario: dict[str, Any]) -> ScenarioFacts:
    """What the methods' protocol hooks read of a scenario (a scenario as a dict, e.g. run.json's)."""
    pipeline = str(scenario.get("pipeline", DEFAULT_PIPELINE))
    return ScenarioFacts(pipeline, _settings(pipeline, scenario.get("settings") or {}),
                         tuple(_conditions(scenario)))


def deviations(scenario: dict[str, Any]) -> list[Deviation]:
    """Every protocol setting whose resolved value in `scenario` (a scenario as a dict, e.g. run.json's
    `scenario`) differs from the papers' (or, where a method's room says so, from its code's)."""
    model = ModelSpec.model_validate(scenario.get("model") or {})
    dataset = scenario.get("dataset") or {}
    want: list[tuple[str, Any, Any]] = [("model.temperature", model.temperature, 0.0), ("model.seed", model.seed, 42),
                                        ("dataset.seed", dataset.get("seed", 42), 42)]
    found = [Deviation(key, value, paper) for key, value, paper in want if value != paper]
    facts = facts_of(scenario)
    for method in reports():
        found += method.deviations(facts)
    return found


def undeclared(description: str, found: list[Deviation]) -> list[Deviation]:
    """The deviations a description does not declare. A declaration says `Deviation` and writes each
    deviating setting as `name = value` (e.g. `rounds = 1`), so a reader sees what differs."""
    text = " ".join(description.split())
    if found and "deviation" not in text.lower():
        return list(found)
    return [d for d in found if f"{d.name} = {d.value}" not in text]


def protocol_line(scenario: dict[str, object], rows: Sequence[Row] = (), order: Sequence[str] = ()) -> str:
    """One line for a report header: the deviations in force (or that the run keeps the protocol),
    then each method's clauses (how it differs from its code; what the run's rows show), then what
    differs by design."""
    found = deviations(scenario)
    facts = facts_of(scenario)
    methods = reports()
    # A method that leaves the temperature out of some calls: 0 is what the calls that send one send.
    where = " on every call that sends one" if any(m.leaves_temperature_out(facts) for m in methods) else ""
    line = (f"keeps the papers' protocol (temperature 0{where}, seed 42, and the pipeline's paper settings)"
            if not found else "differs from the papers' protocol: " + "; ".join(map(str, found)))
    clauses = [c for m in methods for c in m.differences(facts)]
    clauses += [c for m in methods for c in m.row_notes(rows, order)]
    line = "; ".join([line, *clauses])
    return ". ".join([line, *filter(None, (m.closing(facts) for m in methods))])
