"""The pipeline contract: every member the runner uses, declared here with its default.

A pipeline is a subclass of `Pipeline`. The runner resolves it once per run, in planning:

1. `settings_model` validates the scenario's `settings:` block (once);
2. `check` refuses flags and variants the pipeline does not have (`flags`, `variants`,
   `requires_variant`), and `plan` decodes each condition into the pipeline's typed
   `ConditionPlan` (`plan_model`): `c1r1k1-ind` becomes `challenger=True, coordination="independent"`;
3. `prepare` opens what every worker will share (a corpus index), so a missing one fails the run
   before any model call; `accepts_budget`/`with_budget` say whether a condition can spend a
   per-question compute budget (`budget_match`), and `uses_verifier` whether CLEAR's verifier
   runs (run.json then records its passage length);
4. `__call__` answers one question; its `Outcome.summary` is an instance of `summary_model`.

The settings and the plans are written to run.json, so a resume or a worker on another machine
runs exactly what was planned. One instance serves every question of a run, from several worker
threads: keep per-question state in local variables, never on `self`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from medpanel.agents.plan import ConditionPlan, PlanError
from medpanel.agents.settings import PipelineSettings
from medpanel.agents.summary import Summary
from medpanel.agents.tables import TableSpec
from medpanel.agents.types import Condition, Question

if TYPE_CHECKING:  # the session is the runner's to make: a reader of a pipeline's settings and tables imports no client
    from medpanel.agents.model.client import QuestionSession

__all__ = ["Outcome", "Pipeline", "PipelineSettings"]


@dataclass
class Outcome:
    """A pipeline's verdict on one question; the runner scores it and stores the transcript."""

    answer: tuple[str, ...] = ()
    invalid: bool = False
    summary: Summary = field(default_factory=Summary)


SettingsT = TypeVar("SettingsT", bound=PipelineSettings)
PlanT = TypeVar("PlanT", bound=ConditionPlan)


class Pipeline(abc.ABC, Generic[SettingsT, PlanT]):
    """A method: roles composed into an answer for one question. Subclass it and implement `__call__`."""

    settings_model: type[PipelineSettings] = PipelineSettings
    """The `settings:` block (unknown keys refused)."""
    plan_model: type[ConditionPlan] = ConditionPlan
    """What `plan` returns, and how run.json's stored plans are read back."""
    summary_model: type[Summary] = Summary
    """The per-question facts `__call__` returns; the report reads result rows with it."""
    flags: tuple[str, ...] = ()
    """Flag names the pipeline understands (`c`, `r`, `k`); others in a scenario are an error."""
    variants: tuple[str, ...] = ()
    """Named conditions (`variants: [between-gap]`, or a slug's tail as in `c1r1k1-ind`)."""
    requires_variant: bool = False
    """True when every condition must name one of `variants`."""
    tables: tuple[TableSpec, ...] = ()
    """Report tables of this pipeline's own facts (recruitment, CLEAR's routes ...), computed from
    its result rows after the tables every run has."""

    def check(self, condition: Condition, name: str) -> None:
        """Refuse flags and variants this pipeline does not have (`name` as the scenario wrote it)."""
        unknown = set(condition.flags) - set(self.flags) - {"variant"}
        if unknown:
            raise PlanError(f"pipeline {name!r} has no flag {', '.join(sorted(unknown))}. "
                            f"Its flags are: {', '.join(self.flags)}", field="flags")
        variant = condition.flags.get("variant")
        if variant is None and self.requires_variant:
            raise PlanError(f"pipeline {name!r} needs variants, e.g. variants: [{', '.join(self.variants)}]",
                            field="variants")
        if variant is not None and variant not in self.variants:
            raise PlanError(f"pipeline {name!r} has no condition variant {variant!r}. "
                            f"Its variants are: {', '.join(self.variants) or 'none'}", field="variants")

    def plan(self, condition: Condition, settings: SettingsT) -> PlanT:
        """Decode a condition into this pipeline's plan (the default keeps flags and variant only)."""
        variant = condition.flags.get("variant")
        return self.plan_model(slug=condition.slug, flags=condition.flags,  # type: ignore[return-value]
                               variant=str(variant) if variant is not None else None)

    def read_plan(self, stored: dict[str, object], settings: SettingsT) -> PlanT:
        """A plan read back from run.json. A pipeline whose plan gained decoded fields re-decodes a plan
        stored without them here, so a run started by an older version still resumes."""
        return self.plan_model.model_validate(stored)  # type: ignore[return-value]

    def prepare(self, plans: Sequence[PlanT], settings: SettingsT) -> None:
        """Open what every worker will share, once, before any model call. Default: nothing."""

    def accepts_budget(self, plan: PlanT) -> bool:
        """Can this condition spend a per-question budget (`budget_match`)? Default: no."""
        return False

    def with_budget(self, settings: SettingsT, budget: dict[str, object]) -> SettingsT:
        """These settings with one question's budget (only for conditions that `accepts_budget`)."""
        raise PlanError(f"{type(self).__name__} cannot spend a per-question budget", field="budget_match")

    def uses_verifier(self, plans: Sequence[PlanT], settings: SettingsT) -> bool:
        """Does any condition run CLEAR's verifier (run.json then records its passage length)?"""
        return False

    @abc.abstractmethod
    async def __call__(self, question: Question, plan: PlanT, session: QuestionSession,
                       settings: SettingsT) -> Outcome:
        """Answer one question. Build the question's agents here (never share them across questions)."""


SomePipeline = Pipeline[Any, Any]
"""A pipeline of whichever settings and plan: what the registry, the planner and the runner hold.
Its settings and plan types are its own (each pipeline's `settings_model` checks them), so they
cannot be named where pipelines of several methods sit side by side."""
