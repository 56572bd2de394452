"""The three published multi-agent methods as variants of one pipeline, so one run holds them side
by side on the same questions, with one cache and paired statistics (as `baseline` holds direct,
cot and sc). `pipeline: multiagent, variants: [medagents, mdagents, kamac]`; each method's settings
are its own block (`settings: {mdagents: {rounds: 3}}`). Slugs are the method names; each method's
default follows MedAgentsBench's copy of its code, and `<method>-original` follows the paper's own
repository where the two differ (`mdagents-original`, `medagents-original`)."""

from __future__ import annotations

from pydantic import Field

from medpanel.agents.model.client import QuestionSession
from medpanel.agents.pipelines.base import Outcome, Pipeline, PipelineSettings, SomePipeline
from medpanel.agents.plan import ConditionPlan, PlanError
from medpanel.agents.summary import Summary
from medpanel.agents.types import Condition, Question
from medpanel.methods.kamac.pipeline import KamacPipeline, KamacSettings
from medpanel.methods.mdagents.pipeline import MDAgentsPipeline, MDAgentsSettings
from medpanel.methods.medagents.pipeline import MedAgentsPipeline, MedAgentsSettings

METHODS = ("medagents", "mdagents", "kamac")
VARIANTS: dict[str, tuple[str, str | None]] = {
    # variant -> (method, that method's own variant)
    **{m: (m, None) for m in METHODS},
    "medagents-original": ("medagents", "original"),
    "mdagents-original": ("mdagents", "original"),
}


class MultiAgentSettings(PipelineSettings):
    medagents: MedAgentsSettings = Field(default_factory=MedAgentsSettings)
    """The `medagents` variant's settings."""
    mdagents: MDAgentsSettings = Field(default_factory=MDAgentsSettings)
    """The `mdagents` variant's settings."""
    kamac: KamacSettings = Field(default_factory=KamacSettings)
    """The `kamac` variant's settings."""

    def method_settings(self, method: str) -> PipelineSettings:
        """The settings of the published method `method`."""
        blocks: dict[str, PipelineSettings] = {"medagents": self.medagents, "mdagents": self.mdagents,
                                               "kamac": self.kamac}
        return blocks[method]


class MultiAgentPlan(ConditionPlan):
    method: str


class MultiAgentPipeline(Pipeline[MultiAgentSettings, MultiAgentPlan]):
    settings_model = MultiAgentSettings
    plan_model = MultiAgentPlan
    summary_model = Summary
    variants = tuple(VARIANTS)
    requires_variant = True

    def __init__(self) -> None:
        self.methods: dict[str, SomePipeline] = {
            "medagents": MedAgentsPipeline(), "mdagents": MDAgentsPipeline(), "kamac": KamacPipeline()}

    def plan(self, condition: Condition, settings: MultiAgentSettings) -> MultiAgentPlan:
        variant = condition.flags.get("variant")
        if variant not in VARIANTS:
            raise PlanError(f"pipeline multiagent needs a variant, one of {', '.join(VARIANTS)}; got {variant!r}",
                            field="variants")
        return MultiAgentPlan(slug=condition.slug, flags=condition.flags, variant=str(variant),
                              method=VARIANTS[str(variant)][0])

    async def __call__(self, question: Question, plan: MultiAgentPlan, session: QuestionSession,
                       settings: MultiAgentSettings) -> Outcome:
        inner = ConditionPlan(slug=plan.slug, flags=plan.flags, variant=VARIANTS[str(plan.variant)][1])
        return await self.methods[plan.method](question, inner, session, settings.method_settings(plan.method))
