"""Planning a run: the scenario's pipeline resolved once, its conditions planned, questions loaded.

`make_plan` is where a scenario's pipeline is looked up and its settings validated, once per run;
every condition is decoded into the pipeline's typed plan (`Pipeline.plan`), and run.json stores
the settings and the plans (`ResolvedRun.record`), so a resume or a worker on another machine
reads them back (`ResolvedRun.from_record`) instead of re-deriving them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from pydantic import ValidationError

from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines.base import PipelineSettings, SomePipeline
from medpanel.agents.pipelines.registry import UnknownPipeline, get_pipeline
from medpanel.agents.pipelines.run import Resolved
from medpanel.agents.plan import ConditionPlan, PlanError
from medpanel.agents.types import Condition, Question
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario import axes
from medpanel.experiments.run.scenario.axes import RunAxes
from medpanel.experiments.run.scenario.budget_match import BudgetReference, load_reference
from medpanel.experiments.run.scenario.runspec import updated
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.sources.dataset_parts import check_parts, grading_files, load_parts
from medpanel.experiments.run.sources.datasets import load_dataset
from medpanel.experiments.run.sources.references import resolve as resolve_references
from medpanel.experiments.run.store.records import PLAN_FORMAT, PlanRecord
from medpanel.experiments.run.store.storage import Pair


@dataclass(frozen=True)
class ResolvedRun:
    """A run's pipeline, looked up once, with its settings validated once and every condition planned."""

    name: str
    """The pipeline as the scenario names it (a built-in name, `module:Class`, an entry point)."""
    pipeline: SomePipeline
    settings: PipelineSettings
    plans: dict[str, ConditionPlan]
    """Condition slug -> its plan."""

    def condition(self, slug: str) -> Resolved:
        return Resolved(self.pipeline, self.settings, self.plans[slug])

    def uses_verifier(self) -> bool:
        return self.pipeline.uses_verifier(list(self.plans.values()), self.settings)

    def record(self) -> PlanRecord:
        """run.json's `plan` block."""
        return PlanRecord(format_version=PLAN_FORMAT, pipeline=self.name,
                          settings=self.settings.model_dump(mode="json"),
                          conditions={slug: p.model_dump(mode="json") for slug, p in self.plans.items()})

    @classmethod
    def from_record(cls, record: PlanRecord, *, file: str) -> ResolvedRun:
        """Read back a stored plan: one lookup, one validation of the settings and of each plan by
        the pipeline's own models."""
        pipeline = _pipeline(record.pipeline, file)
        settings = pipeline.settings_model.model_validate(record.settings)
        plans = {slug: pipeline.read_plan(p, settings) for slug, p in record.conditions.items()}
        return cls(record.pipeline, pipeline, settings, plans)


def _pipeline(name: str, file: str) -> SomePipeline:
    try:
        return get_pipeline(name)
    except UnknownPipeline as exc:
        raise UserError(str(exc), file=file, field="pipeline") from None


def resolve_run(name: str, settings: dict[str, object], conditions: list[Condition], *,
                file: str = "scenario") -> ResolvedRun:
    """Look the pipeline up, check and plan every condition, validate the settings: every problem is
    one `UserError` naming the scenario key to fix."""
    pipeline = _pipeline(name, file)
    # The model and prompt axes are the run's, not the pipeline's: it plans the base condition.
    bases = {cond.slug: axes.strip_axes(cond) for cond in conditions}
    try:
        for cond in bases.values():
            pipeline.check(cond, name)
    except PlanError as exc:
        raise UserError(str(exc), file=file, field=exc.field) from None
    try:
        validated = pipeline.settings_model.model_validate(settings)
    except ValidationError as exc:  # name the first bad key
        errs = exc.errors()
        loc = ".".join(str(x) for x in errs[0]["loc"])
        raise UserError(f"{errs[0]['msg']}. Valid settings for {name!r}: "
                        f"{', '.join(pipeline.settings_model.model_fields)}", file=file,
                        field=f"settings.{loc}" if loc else "settings") from None
    try:
        plans = {slug: _renamed(pipeline.plan(cond, validated), slug) for slug, cond in bases.items()}
    except PlanError as exc:
        raise UserError(str(exc), file=file, field=exc.field) from None
    return ResolvedRun(name, pipeline, validated, plans)


def _renamed(plan: ConditionPlan, slug: str) -> ConditionPlan:
    return plan if plan.slug == slug else plan.model_copy(update={"slug": slug})


def auto_shard_size(n_pairs: int, workers: int) -> int:
    """Two shards per worker: a handful of trials whatever the grid size.

    Balance does not depend on shard size, because a worker that finishes its shard goes on with
    pairs nobody has claimed yet (see `experiments/run/execution/worker.py`).
    """
    return max(1, math.ceil(n_pairs / (workers * 2)))


@dataclass
class Plan:
    scenario: Scenario
    conditions: list[Condition]
    questions: list[Question]
    repeats: int
    shard_size: int
    budget: BudgetReference | None = None
    """Per-question budgets from `budget_match`, read at plan time and kept in run.json."""
    stored: ResolvedRun | None = field(default=None, repr=False)
    """The resolved pipeline when planning already gave it."""
    record: PlanRecord | None = field(default=None, repr=False)
    """run.json's `plan` block of an existing run (runs made before the plan was recorded have none)."""
    file: str = "scenario"
    """What error messages name: the scenario file, or an existing run's run.json."""

    @cached_property
    def resolved(self) -> ResolvedRun:
        """The pipeline, its settings and the condition plans: resolved at most once per plan (the
        runner resolves it before its workers start)."""
        if self.stored is not None:
            return self.stored
        if self.record is not None:
            try:
                return ResolvedRun.from_record(self.record, file=self.file)
            except (KeyError, TypeError, ValueError) as exc:
                detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
                raise UserError(f"the stored plan no longer validates ({detail}). Restore run.json, or start the "
                                "run again", file=self.file, field="plan") from None
        return resolve_run(self.scenario.pipeline, self.scenario.settings, self.conditions, file=self.file)

    @property
    def model_spec(self) -> ModelSpec:
        """The model settings with the run's per-call timeout applied."""
        timeout = self.scenario.run.per_call_timeout_s
        model = self.scenario.model
        return model.model_copy(update={"timeout_s": timeout}) if timeout else model

    @property
    def pairs(self) -> list[Pair]:
        # Question-major: a shard holds every condition of a few questions, so conditions that
        # share their first turn hit the response cache one after another instead of racing.
        # Built once per grid: the workers read its length on every committed pair, and rebuilding
        # a 34,480-pair list each time made the runner's cost per pair grow with the grid.
        key = (id(self.questions), len(self.questions), id(self.conditions), len(self.conditions), self.repeats)
        cached = self.__dict__.get("_pairs")
        if cached is None or cached[0] != key:
            cached = (key, [(c.slug, q.dataset, q.qid, r) for r in range(self.repeats) for q in self.questions
                            for c in self.conditions])
            self.__dict__["_pairs"] = cached
        return cached[1]

    @property
    def question_index(self) -> dict[tuple[str, str], Question]:
        """(dataset, qid) -> question, built once per question list."""
        key = (id(self.questions), len(self.questions))
        cached = self.__dict__.get("_question_index")
        if cached is None or cached[0] != key:
            cached = (key, {(q.dataset, q.qid): q for q in self.questions})
            self.__dict__["_question_index"] = cached
        return cached[1]

    def shards(self) -> list[list[Pair]]:
        pairs = self.pairs
        return [pairs[i : i + self.shard_size] for i in range(0, len(pairs), self.shard_size)]

    def resolvable(self) -> ResolvedRun | None:
        """`resolved`, or None for a hand-built plan whose conditions its pipeline refuses: such a plan
        fails when it runs (`Runner.prepare`), as it always did, but can still make a run directory."""
        try:
            return self.resolved
        except UserError:
            return None

    @cached_property
    def axes(self) -> RunAxes:
        """Each condition's model (`models:`), routed roles (`roles:`) and prompt overrides."""
        return RunAxes.of(self.scenario, self.conditions, self.model_spec)

    def accommodations(self) -> dict[str, object]:
        """The small-model limits in force for this run (context window, passage and string lengths)."""
        sc = self.scenario
        resolved = self.resolvable()
        verifier = resolved is not None and resolved.uses_verifier()
        out = sc.model.accommodations(sc.settings, verifier=verifier)
        if sc.models:  # each model works under its own backend's limits
            out["models"] = {m.label: m.spec().accommodations(sc.settings, verifier=verifier) for m in sc.models}
        return out


def make_plan(scenario: Scenario, *, base_dir: Path | None, limit: int | None = None, repeats: int | None = None,
              workers: int | None = None, file: str = "scenario") -> Plan:
    # Overrides go through the scenario's own models, so --limit 0 or --workers 0 meet the bounds
    # the YAML keys have (model_copy(update=...) would skip validation).
    scenario = scenario.model_copy(update={
        "dataset": updated(scenario.dataset, {"limit": limit}, block="dataset"),
        "run": updated(scenario.run, {"workers": workers, "repeats": repeats}, block="run")})
    run = scenario.run
    axes.check(scenario, file)
    scenario = axes.resolve_prompts(scenario, base=base_dir or Path.cwd(), file=file)
    scenario = _grade_free_text_parts(scenario, base_dir, file)
    conditions = scenario.conditions()
    resolved = resolve_run(scenario.pipeline, scenario.settings, conditions, file=file)
    ds = scenario.dataset
    if ds.parts is not None:
        check_parts(ds, file)
        questions = load_parts(ds.parts, ds.limit, ds.seed, base_dir=base_dir)
    else:
        questions = load_dataset(ds.source, ds.path, ds.subsets, ds.limit, ds.seed, base_dir=base_dir,
                                 multi_answer=ds.multi_answer, split=ds.split, fields=ds.fields, preset=ds.preset)
    if not questions:
        raise UserError("the dataset selection is empty. Check dataset.subsets and dataset.limit", file=file,
                        field="dataset")
    if scenario.references is not None:  # read and matched now, before any model call; run.json keeps the path
        refs = resolve_references(scenario.references, questions, base_dir=base_dir, file=file,
                                  slugs=[c.slug for c in conditions])
        scenario = scenario.model_copy(update={"references": refs})
    budget = None
    if scenario.budget_match is not None:
        scenario, budget = _budget_match(scenario, resolved, questions, file)
    n_pairs = len(conditions) * len(questions) * run.repeats
    shard = run.shard_size or auto_shard_size(n_pairs, run.workers)
    return Plan(scenario=scenario, conditions=conditions, questions=questions, repeats=run.repeats,
                shard_size=shard, budget=budget, stored=resolved)


def _grade_free_text_parts(scenario: Scenario, base_dir: Path | None, file: str) -> Scenario:
    """A suite with free-text parts grades each against its own files: their paths (resolved from the
    scenario's folder, as the parts are read) become the grader's `settings.rubric_file`, which
    run.json then records. Only CLEAR's pipeline has a grader; a rubric_file of one's own beside
    free-text parts would grade them against other keys, so both are refused in one line."""
    parts = scenario.dataset.parts
    files = grading_files(parts, base_dir) if parts else []
    if not files:
        return scenario
    if scenario.pipeline != "clear":
        raise UserError(f"free-text parts are graded by the clear pipeline's grader; pipeline {scenario.pipeline!r} "
                        "has none. Use pipeline: clear, or drop the source: freetext parts", file=file,
                        field="dataset.parts")
    given = scenario.settings.get("rubric_file")
    if given is not None and given != files:  # equal: a plan made again from its own record
        raise UserError("settings.rubric_file is set by the free-text parts (each graded by its own file): "
                        "remove settings.rubric_file", file=file, field="settings.rubric_file")
    return scenario.model_copy(update={"settings": {**scenario.settings, "rubric_file": files}})


def _budget_match(scenario: Scenario, resolved: ResolvedRun, questions: list[Question],
                  file: str) -> tuple[Scenario, BudgetReference]:
    """Check that every condition can spend a budget, and read the reference's per-question compute."""
    for slug, plan in resolved.plans.items():
        if not resolved.pipeline.accepts_budget(plan):
            raise UserError(f"condition {slug!r} (pipeline {scenario.pipeline!r}) makes a fixed number of calls "
                            "per question and cannot be budget-matched; budget_match applies to sampling baselines "
                            "only (pipeline sc). Remove budget_match, or run sc", file=file, field="budget_match")
    spec = scenario.budget_match
    assert spec is not None
    budget = load_reference(spec, model=(scenario.model.backend, scenario.model.model_name), file=file)
    if not any((q.dataset, q.qid) in budget.calls for q in questions):
        raise UserError(f"none of this run's {len(questions)} questions has a usable row for condition "
                        f"{spec.condition!r} in the reference run {spec.run}. Use the reference's dataset block "
                        "(source, subsets, limit, seed)", file=file, field="budget_match")
    # run.json records the resolved path, so the record says which run the budgets came from.
    resolved_spec = spec.model_copy(update={"run": budget.run})
    return scenario.model_copy(update={"budget_match": resolved_spec}), budget
