"""The papers' protocol, and where a scenario (or a run made from one) departs from it.

The settings both papers fix, and where they say so:

| setting | value | source |
|---|---|---|
| `model.temperature`, `model.seed` | 0, 42 | seed paper A.4; CLEAR runs Qwen at temperature 0 |
| `dataset.seed` | 42 | medpanel's seeded sample of questions per subset |
| `settings.rounds` x `turns_per_round` | 3 x 3 | seed paper A.1, every multi-specialist condition |
| `settings.initial_specialists` | 2 | seed paper A.1: two question-conditioned roles |
| `max_recruit_per_turn`, `max_recruit_total`, `max_panel` | 2, 3, 5 | seed paper A.2 |
| `settings.k` | 16 | seed paper A.3 (retrieval depth); CLEAR's local top-16 |
| `settings.dynamic_k` | 8 | CLEAR A.2: "the eight retrieved dynamic documents" |
| `settings.temperature` (`sc` samples) | 0 | the protocol's temperature; sc must sample above it |

The published multi-agent methods (MedAgents, MDAgents, KAMAC) follow the code behind
MedAgentsBench's numbers; what still differs from that code is a fixed list per method
(`METHOD_DIFFERENCES`, each written out in `docs/methods/<method>.md`), and a report whose run holds
one of them names those differences in its `protocol:` line. MDAgents' code sends no temperature on
most calls; the line says which of its calls send one (`METHOD_SAMPLING`).

For the benchmark context's single-model methods the reference is MedAgentsBench's own code
(`benchmark_protocol`): the values it fixes count as deviations too, written `(benchmark's code: X)`,
and the line adds what differs from that code by design.

`deviations` compares a scenario's resolved values (the pipeline's defaults filled in) with that
table. A shipped scenario that deviates says so in its `description` (a test holds every
shipped scenario to it), and every report header prints the deviations of the run it describes,
`--set` overrides included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines.registry import get_pipeline
from medpanel.methods.benchmark import protocol as benchmark_protocol
from medpanel.experiments.run.scenario import Scenario
from medpanel.experiments.run.store import Row

PANEL_PIPELINES = ("panel", "calibrated")
"""Pipelines whose conditions are multi-specialist discussions (calibrated: its group levels)."""
RETRIEVING_VARIANTS = ("upfront", "between-blind", "between-gap", "routed", "clear")


@dataclass(frozen=True)
class Deviation:
    key: str
    """Dotted key, e.g. `settings.rounds`."""
    value: Any
    paper: Any
    source: str = "paper"
    """Whose value `paper` is: the papers', or the benchmark's code (its single-model methods)."""

    @property
    def name(self) -> str:
        return self.key.rsplit(".", 1)[-1]

    def __str__(self) -> str:
        return f"{self.name} = {self.value} ({self.source}: {self.paper})"


def _settings(pipeline: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The pipeline's settings with its defaults filled in (unvalidatable settings: as written)."""
    try:
        model = get_pipeline(pipeline).settings_model
        return model.model_validate(settings).model_dump()
    except Exception:  # an unknown pipeline or bad settings are the scenario loader's to report
        return dict(settings)


def _conditions(scenario: dict[str, Any]) -> list[dict[str, Any]]:
    try:
        return [c.model_dump() for c in Scenario.model_validate(scenario).conditions()]
    except Exception:
        return []


def _retrieves(pipeline: str, conditions: list[dict[str, Any]]) -> bool:
    for c in conditions:
        flags = c.get("flags", {})
        if flags.get("k") == 1 or flags.get("variant") in RETRIEVING_VARIANTS:
            return True
    return False


def deviations(scenario: dict[str, Any]) -> list[Deviation]:
    """Every protocol setting whose resolved value in `scenario` (a scenario as a dict, e.g. run.json's
    `scenario`) differs from the papers'."""
    pipeline = str(scenario.get("pipeline", "generalist"))
    model = ModelSpec.model_validate(scenario.get("model") or {})
    dataset = scenario.get("dataset") or {}
    s = _settings(pipeline, scenario.get("settings") or {})
    conditions = _conditions(scenario)
    variants = {str(c.get("flags", {}).get("variant", "")) for c in conditions}
    want: list[tuple[str, Any, Any]] = [("model.temperature", model.temperature, 0.0), ("model.seed", model.seed, 42),
                                        ("dataset.seed", dataset.get("seed", 42), 42)]
    if pipeline in PANEL_PIPELINES:
        want += [("settings.rounds", s.get("rounds"), 3), ("settings.turns_per_round", s.get("turns_per_round"), 3)]
    if pipeline == "panel":
        want += [("settings.initial_specialists", s.get("initial_specialists"), 2),
                 ("settings.max_recruit_per_turn", s.get("max_recruit_per_turn"), 2),
                 ("settings.max_recruit_total", s.get("max_recruit_total"), 3),
                 ("settings.max_panel", s.get("max_panel"), 5)]
    if pipeline in ("generalist", *PANEL_PIPELINES) and _retrieves(pipeline, conditions):
        want.append(("settings.k", s.get("k"), 16))
    if pipeline == "clear":
        modes = variants - {""} or {"clear-default"}
        if modes & {"rag-bm25", "rag-dense", "clear-default", "clear-dual", "clear-qpis", "clear-no-followup"}:
            want.append(("settings.k", s.get("k"), 16))
        if modes & {"online", "clear-default", "clear-dual", "clear-qpis", "clear-no-followup"}:
            want.append(("settings.dynamic_k", s.get("dynamic_k"), 8))
    if pipeline == "sc" or (pipeline == "baseline" and "sc" in variants):
        want.append(("settings.temperature", s.get("temperature"), 0.0))
    # A settings key the pipeline does not have resolves to None: nothing to compare there.
    found = [Deviation(key, value, paper) for key, value, paper in want
             if value != paper and not (value is None and key.startswith("settings."))]
    methods = benchmark_protocol.methods_of(pipeline, variants)
    return found + [Deviation(key, value, code, "benchmark's code")
                    for key, value, code in benchmark_protocol.setting_differences(methods, s)]


def undeclared(description: str, found: list[Deviation]) -> list[Deviation]:
    """The deviations a description does not declare. A declaration says `Deviation` and writes each
    deviating setting as `name = value` (e.g. `rounds = 1`), so a reader sees what differs."""
    text = " ".join(description.split())
    if found and "deviation" not in text.lower():
        return list(found)
    return [d for d in found if f"{d.name} = {d.value}" not in text]


MULTIAGENT_METHODS = ("medagents", "mdagents", "kamac")
SEED = "a seed on every call (model.seed; the code sends none)"
METHOD_DIFFERENCES: dict[str, tuple[str, ...]] = {
    # What differs from the method's code (MedAgentsBench's copy; KAMAC's own), short; the docs page
    # `docs/methods/<method>.md` gives each one in full, with the reason.
    "medagents": ("medpanel's own prompt wording", "structured replies with the answer constrained to the "
                  "question's letters, one re-ask, invalid counted (code: regex parse, non-letters dropped)",
                  "votes are a yes/no field (code: first 'yes'/'no' substring)", SEED),
    "mdagents": ("medpanel's own prompt wording", "structured replies replace the answer-parser call "
                 "(one call fewer); an invalid moderator reply falls back to the experts' majority",
                 "no agent-opening calls (code: each agent first sends its own instruction)",
                 "options in their order (code: unseeded shuffle)",
                 "exemplars drawn seeded from exemplar_file, the builtin six by default (code: 5 from the "
                 "dataset's train split, unseeded)",
                 "experts named by specialty alone (code: with the recruiter's one-line description)", SEED),
    "kamac": ("medpanel's own prompt wording", "structured replies, one re-ask, invalid counted; an invalid "
              "moderator reply falls back to the majority",
              "turns bounded by max_turns, panel by max_agents (code: unbounded)",
              "every role on the run's model (code: recruiter, assistant, moderator on gpt-4.1-mini)",
              "the first turn shows full opinions (code: only the letters when all agree)",
              "the plain assessment prompt (the README's runs: --cot, a RADCURE survival prompt)",
              "a skipped recruitment leaves the specialists' histories as they were (code: overwrites their "
              "last message)", "a turn added by a skipped recruitment before the last turn runs (code: its gap "
              "check fails with a KeyError)", SEED),
}
METHOD_SAMPLING: dict[str, str] = {
    # A method whose code sends no temperature on some calls: the clause says which calls do send one.
    "mdagents": "mdagents sends a temperature only where its code does (the solo answer, the moderator, the "
                "ICT decision: model.temperature); every other call sends none, so the provider's default applies",
}


def methods_in(scenario: dict[str, Any]) -> list[str]:
    """The published multi-agent methods a scenario runs (as pipelines or as variants)."""
    pipeline = str(scenario.get("pipeline", "generalist"))
    if pipeline in MULTIAGENT_METHODS:
        return [pipeline]
    variants = {str(c.get("flags", {}).get("variant", "")) for c in _conditions(scenario)}
    return [m for m in MULTIAGENT_METHODS if any(v == m or v.startswith(f"{m}-") for v in variants)]


def method_differences(scenario: dict[str, Any]) -> list[str]:
    """One clause per published method in the run: how it still differs from its code (after what it
    sends as temperature, where its code leaves the temperature out)."""
    clauses: list[str] = []
    for m in methods_in(scenario):
        if m in METHOD_SAMPLING:
            clauses.append(METHOD_SAMPLING[m])
        clauses.append(f"{m} differs from its code in: {', '.join(METHOD_DIFFERENCES[m])} (docs/methods/{m}.md)")
    return clauses


def screened_critiques(rows: Sequence[Row], order: Sequence[str] = ()) -> str | None:
    """Per condition, the share of its questions on which the Challenger named an option as the answer
    (its critique re-asked, and redacted if the rewrite did too; a row's `critiques_screened`); None
    when no critique was screened. Error rows count among the questions, never as screened."""
    questions: dict[str, int] = {}
    screened: dict[str, list[int]] = {}
    for r in rows:
        questions[r.condition] = questions.get(r.condition, 0) + 1
        n = int(r.summary.get("critiques_screened") or 0)
        if n:
            screened.setdefault(r.condition, []).append(n)
    if not screened:
        return None
    names = [c for c in order if c in screened] + [c for c in screened if c not in order]
    return "Challenger critiques screened for a named answer: " + "; ".join(
        f"{c} {len(screened[c])}/{questions[c]} questions ({100 * len(screened[c]) / questions[c]:.1f}%, "
        f"{sum(screened[c])} critique{'' if sum(screened[c]) == 1 else 's'})" for c in names)


def protocol_line(scenario: dict[str, Any], rows: Sequence[Row] = (), order: Sequence[str] = ()) -> str:
    """One line for a report header: the deviations in force (or that the run keeps the protocol),
    then how each published multi-agent method in the run differs from its code, then (given the
    run's rows) the rate of screened Challenger critiques per condition, when any was screened."""
    found = deviations(scenario)
    # A method that leaves the temperature out of some calls: 0 is what the calls that send one send.
    where = " on every call that sends one" if set(methods_in(scenario)) & set(METHOD_SAMPLING) else ""
    line = (f"keeps the papers' protocol (temperature 0{where}, seed 42, and the pipeline's paper settings)"
            if not found else "differs from the papers' protocol: " + "; ".join(map(str, found)))
    line = "; ".join([line, *method_differences(scenario), *filter(None, [screened_critiques(rows, order)])])
    variants = {str(c.get("flags", {}).get("variant", "")) for c in _conditions(scenario)}
    design = benchmark_protocol.by_design(benchmark_protocol.methods_of(str(scenario.get("pipeline", "")), variants))
    return f"{line}. Differs from the benchmark's code by design: {design}" if design else line
