"""The benchmark context (the seed paper's Table 7): the single-model methods of MedAgentsBench and the
seed's own best conditions, as variants of one `benchmark` pipeline, so one run answers them all
on the same questions with one backend, cache and paired statistics.

| variant                  | calls / question                  | what it does                                      |
|--------------------------|-----------------------------------|---------------------------------------------------|
| `zero-shot`              | 1                                 | `direct`'s request exactly (shares its cache)    |
| `few-shot`               | 1                                 | zero-shot + `k_shots` solved exemplars (`exemplars`)|
| `cot`                    | 1                                 | `cot`'s request exactly                           |
| `cot-sc`                 | `n_samples`                       | `sc`: seeded samples at `temperature` > 0, majority|
| `multipersona`           | 3 + `persona_rounds`              | personas, brainstorm, collaboration x R, answer   |
| `self-refine`            | 1 + 2 x iterations run (max 7)    | answer, then feedback + revision x `refine_iterations`|
| `medprompt`              | `shuffles`                        | kNN (BM25) CoT exemplars, choice-shuffle ensemble |
| `panel-c1r1`, `panel-c1r0k1`, `generalist-between-gap` | as those pipelines | the seed's conditions |

The seed's conditions run through their own pipelines, with `settings.panel` / `settings.generalist`.

`zero-shot`, `few-shot`, `cot`, `cot-sc`, `multipersona`, `self-refine` and `medprompt` are also
pipelines of their own (`pipeline: medprompt`). Vote rules: `cot-sc` and `medprompt` use the
baselines' majority with its tie rule (first answer to reach the winning count, in member order);
MedPrompt maps each member's letter back to the original option before the vote. Self-Refine's
answer is its last valid answer (a revision still invalid after the re-ask keeps the previous one,
recorded as `fell_back`); it stops early when the feedback finds nothing to revise (as the paper
and the benchmark's `self_refine-3` do), unless `refine_stop_early: false`.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import letters_of
from medpanel.agents.pipelines.base import ConditionPlan, Outcome, Pipeline, PlanError
from medpanel.agents.pipelines.baselines import (
    SEED_STRIDE,
    BaselinePipeline,
    BaselineSettings,
    BaselineSummary,
    _spent,
    vote,
)
from medpanel.agents.pipelines.exemplars import BUILTIN, ExemplarPool
from medpanel.agents.pipelines.generalist import GeneralistPipeline
from medpanel.agents.pipelines.kamac import KamacPipeline
from medpanel.agents.pipelines.mdagents import MDAgentsPipeline
from medpanel.agents.pipelines.medagents import MedAgentsPipeline
from medpanel.agents.pipelines.panel.pipeline import PanelPipeline
from medpanel.agents.roles import baseline, benchmark
from medpanel.agents.types import Condition, Question, TranscriptEvent

Method = Literal["zero-shot", "few-shot", "cot", "cot-sc", "multipersona", "self-refine", "medprompt"]
METHODS: tuple[Method, ...] = ("zero-shot", "few-shot", "cot", "cot-sc", "multipersona", "self-refine", "medprompt")
SEED_CONDITIONS: dict[str, tuple[str, str]] = {
    # variant -> (pipeline, that pipeline's condition slug)
    "panel-c1r1": ("panel", "c1r1"),
    "panel-c1r0k1": ("panel", "c1r0k1"),
    "generalist-between-gap": ("generalist", "between-gap"),
    # The published multi-agent rows of Table 7 run through their own pipelines (an empty slug: the
    # method's default condition), with `settings.medagents` / `mdagents` / `kamac`.
    "medagents": ("medagents", ""),
    "mdagents": ("mdagents", ""),
    "kamac": ("kamac", ""),
}


class BenchmarkSettings(BaselineSettings):
    exemplars: str = BUILTIN
    """`builtin` (the team's own six exemplars) or a JSONL path of a split that is not evaluated."""
    k_shots: int = Field(default=5, ge=1, le=32)
    """few-shot: exemplars shown (the first k of the pool, the same for every question)."""
    knn_k: int = Field(default=5, ge=1, le=32)
    """medprompt: exemplars chosen per question by BM25 similarity to the stem."""
    shuffles: int = Field(default=3, ge=1, le=64)
    """medprompt: ensemble members, each with its own seeded option order (the benchmark's medprompt-3)."""
    refine_iterations: int = Field(default=3, ge=1, le=10)
    """self-refine: (feedback, revision) iterations at most."""
    refine_stop_early: bool = True
    """self-refine: stop when the feedback finds nothing to revise (false: always run every iteration)."""
    persona_rounds: int = Field(default=2, ge=1, le=10)
    """multipersona: collaboration rounds (the benchmark's multipersona-2)."""
    panel: dict[str, Any] = Field(default_factory=dict)
    """The panel's settings for `panel-*` conditions (validated by the panel pipeline)."""
    generalist: dict[str, Any] = Field(default_factory=dict)
    """The generalist's settings for `generalist-*` conditions."""
    medagents: dict[str, Any] = Field(default_factory=dict)
    """MedAgents' settings (validated by its pipeline), for the `medagents` variant."""
    mdagents: dict[str, Any] = Field(default_factory=dict)
    """MDAgents' settings, for the `mdagents` variant."""
    kamac: dict[str, Any] = Field(default_factory=dict)
    """KAMAC's settings, for the `kamac` variant."""


class BenchmarkPlan(ConditionPlan):
    method: str
    inner: dict[str, Any] | None = None
    """For a seed condition: that pipeline's own plan (its `plan_model` dump)."""


class BenchmarkSummary(BaselineSummary):
    exemplar_source: str | None = None
    exemplars: list[str] | None = None
    excluded_exemplars: list[str] | None = None
    personas: list[str] | None = None
    iterations: list[dict[str, Any]] | None = None
    stopped: str | None = None
    members: list[dict[str, Any]] | None = None


INNER: dict[str, type[Pipeline[Any, Any]]] = {"panel": PanelPipeline, "generalist": GeneralistPipeline,
                                              "medagents": MedAgentsPipeline, "mdagents": MDAgentsPipeline,
                                              "kamac": KamacPipeline}


def _inner(name: str) -> Pipeline[Any, Any]:
    return INNER[name]()


def condition_for(slug: str, pipeline: str) -> Condition:
    """A seed condition's slug as its own pipeline reads it: `c1r0k1` -> flags, `between-gap` -> a variant,
    "" -> the pipeline's one condition (a published method)."""
    if not slug:
        return Condition(slug=pipeline, pipeline=pipeline, flags={})
    pairs = re.fullmatch(r"(?:[a-z]\d)+", slug)
    flags: dict[str, int | str] = ({m[0]: int(m[1]) for m in re.findall(r"[a-z]\d", slug)} if pairs
                                   else {"variant": slug})
    return Condition(slug=slug, pipeline=pipeline, flags=flags)


def permutation(question: Question, seed: int, i: int) -> list[str]:
    """Member i's option order: a shuffle of the letters seeded by (model seed, question, i)."""
    h = hashlib.sha256(f"{seed}/{question.dataset}/{question.qid}/{i}".encode()).hexdigest()
    letters = list(question.letters)
    random.Random(int(h, 16)).shuffle(letters)
    return letters


def shuffled(question: Question, order: list[str]) -> tuple[Question, dict[str, str]]:
    """The question with option texts in `order` under the original letters; shown letter -> original."""
    letters = question.letters
    options = {shown: question.options[orig] for shown, orig in zip(letters, order, strict=True)}
    back = dict(zip(letters, order, strict=True))
    return question.model_copy(update={"options": options, "gold": ()}), back


class BenchmarkPipeline(Pipeline[BenchmarkSettings, BenchmarkPlan]):
    settings_model = BenchmarkSettings
    plan_model = BenchmarkPlan
    summary_model = BenchmarkSummary

    def __init__(self, method: Method | None = None) -> None:
        self.method = method
        self.variants = () if method else (*METHODS, *SEED_CONDITIONS)
        self.requires_variant = method is None
        self._pools: dict[str, ExemplarPool] = {}

    def plan(self, condition: Condition, settings: BenchmarkSettings) -> BenchmarkPlan:
        variant = condition.flags.get("variant")
        method = self.method or variant
        variant_s = str(variant) if variant is not None else None
        if method in SEED_CONDITIONS:
            name, slug = SEED_CONDITIONS[str(method)]
            inner = _inner(name)
            inner_settings = inner.settings_model.model_validate(getattr(settings, name))
            inner_cond = condition_for(slug, name)
            inner.check(inner_cond, name)
            inner_plan = inner.plan(inner_cond, inner_settings)
            return BenchmarkPlan(slug=condition.slug, flags=condition.flags, variant=variant_s, method=str(method),
                                 inner=inner_plan.model_dump(mode="json"))
        if method not in METHODS:
            raise PlanError(f"pipeline benchmark needs a variant, one of {', '.join((*METHODS, *SEED_CONDITIONS))}; "
                            f"got {variant!r}", field="variants")
        if method in ("few-shot", "medprompt"):
            self.pool(settings.exemplars)  # a missing, malformed or test-split pool fails in planning
        return BenchmarkPlan(slug=condition.slug, flags=condition.flags, variant=variant_s, method=str(method))

    def prepare(self, plans: Sequence[BenchmarkPlan], settings: BenchmarkSettings) -> None:
        if any(p.method in ("few-shot", "medprompt") for p in plans):
            self.pool(settings.exemplars)
        for name in INNER:
            inner_plans = [p for p in plans if p.inner is not None and SEED_CONDITIONS[p.method][0] == name]
            if inner_plans:
                inner = _inner(name)
                inner.prepare([inner.plan_model.model_validate(p.inner) for p in inner_plans],
                              inner.settings_model.model_validate(getattr(settings, name)))

    def pool(self, source: str) -> ExemplarPool:
        # A worker that did not run `prepare` (a resumed shard) loads the pool on first use.
        if source not in self._pools:
            self._pools[source] = ExemplarPool(source)
        return self._pools[source]

    def accepts_budget(self, plan: BenchmarkPlan) -> bool:
        return plan.method == "cot-sc"

    def with_budget(self, settings: BenchmarkSettings, budget: dict[str, Any]) -> BenchmarkSettings:
        return BaselinePipeline("sc").with_budget(settings, budget)  # type: ignore[return-value]

    async def __call__(self, question: Question, plan: BenchmarkPlan, session: QuestionSession,
                       settings: BenchmarkSettings) -> Outcome:
        out = await self._answer(question, plan, session, settings)
        # What the method asks for, cache hits and re-asks included: its price run on its own. In a
        # shared-cache run the tokens sent understate a method whose requests another one also makes.
        calls, tokens = _spent(session)
        facts = {**out.summary.data(), "requested_calls": calls, "requested_tokens": tokens}
        return Outcome(answer=out.answer, invalid=out.invalid, summary=type(out.summary).model_validate(facts))

    async def _answer(self, question: Question, plan: BenchmarkPlan, session: QuestionSession,
                      settings: BenchmarkSettings) -> Outcome:
        method = plan.method
        if plan.inner is not None:
            name = SEED_CONDITIONS[method][0]
            inner = _inner(name)
            return await inner(question, inner.plan_model.model_validate(plan.inner), session,
                               inner.settings_model.model_validate(getattr(settings, name)))
        if method == "cot-sc":
            out = await BaselinePipeline("sc")._self_consistency(question, session, settings)
            return Outcome(answer=out.answer, invalid=out.invalid,
                           summary=BenchmarkSummary.model_validate({**out.summary.data(), "method": "cot-sc"}))
        facts: dict[str, Any] = {"method": method}
        if method in ("zero-shot", "cot"):
            parsed = await baseline.answer(session, question, "direct" if method == "zero-shot" else "cot")
            answer = letters_of(parsed) if parsed is not None else ()
        elif method == "few-shot":
            pool = self.pool(settings.exemplars)
            shots, excluded = pool.first(question, settings.k_shots)
            facts |= {"exemplar_source": settings.exemplars, "exemplars": [e.eid for e in shots],
                      "excluded_exemplars": excluded}
            parsed = await benchmark.few_shot(session, question, shots)
            answer = letters_of(parsed) if parsed is not None else ()
        elif method == "multipersona":
            answer = await self._multipersona(question, session, settings, facts)
        elif method == "self-refine":
            answer = await self._self_refine(question, session, settings, facts)
        else:
            answer = await self._medprompt(question, session, settings, facts)
        session.record(TranscriptEvent(kind="decision", role="pipeline", agent=method, step="final",
                                       content=",".join(answer) or "invalid", data={"answer": list(answer)}))
        return Outcome(answer=answer, invalid=not answer, summary=BenchmarkSummary.model_validate(facts))

    async def _multipersona(self, question: Question, session: QuestionSession, settings: BenchmarkSettings,
                            facts: dict[str, Any]) -> tuple[str, ...]:
        solver = benchmark.PersonaSolver(session, question)
        found = await solver.identify()
        personas = found.personas if found is not None else []
        facts["personas"] = personas
        # An unparsed persona list still lets the model go on as "the relevant experts" (recorded above).
        names = ", ".join(personas) if personas else "the relevant experts"
        await solver.brainstorm(names)
        for r in range(1, settings.persona_rounds + 1):
            await solver.collaborate(names, round=r, rounds=settings.persona_rounds)
        parsed = await solver.final()
        return letters_of(parsed) if parsed is not None else ()

    async def _self_refine(self, question: Question, session: QuestionSession, settings: BenchmarkSettings,
                           facts: dict[str, Any]) -> tuple[str, ...]:
        refiner = benchmark.Refiner(session, question)
        parsed = await refiner.initial()
        answer = letters_of(parsed) if parsed is not None else ()
        iterations: list[dict[str, Any]] = []
        stopped = "iterations_done"
        for it in range(1, settings.refine_iterations + 1):
            fb = await refiner.feedback(it)
            if fb is None:
                stopped = "feedback_unparsed"
                break
            if settings.refine_stop_early and not fb.needs_revision:
                iterations.append({"iteration": it, "needs_revision": False})
                stopped = "no_revision_needed"
                break
            revised = await refiner.revise(it, settings.refine_iterations)
            new = letters_of(revised) if revised is not None else ()
            iterations.append({"iteration": it, "needs_revision": fb.needs_revision, "answer": list(new) or None,
                               "fell_back": not new and bool(answer)})
            answer = new or answer
        facts |= {"iterations": iterations, "stopped": stopped}
        return answer

    async def _medprompt(self, question: Question, session: QuestionSession, settings: BenchmarkSettings,
                         facts: dict[str, Any]) -> tuple[str, ...]:
        pool = self.pool(settings.exemplars)
        shots, excluded = pool.nearest(question, settings.knn_k)
        base = session.spec.seed or 0
        members: list[dict[str, Any]] = []
        answers: list[tuple[str, ...] | None] = []
        for i in range(settings.shuffles):
            order = permutation(question, base, i)
            view, back = shuffled(question, order)
            seed = base + i * SEED_STRIDE
            parsed = await benchmark.medprompt_answer(session, view, shots, i=i, seed=seed)
            shown = letters_of(parsed) if parsed is not None else ()
            original = tuple(sorted(back[x] for x in shown)) if shown else None
            answers.append(original)
            members.append({"i": i, "order": order, "shown": list(shown) or None,
                            "answer": list(original) if original else None})
        result = vote(answers)
        session.record(TranscriptEvent(kind="vote", role="pipeline", agent="medprompt", step="vote",
                                       content=result["answer"] or "invalid",
                                       data={**result, "members": [m["answer"] for m in members]}))
        facts |= {"exemplar_source": settings.exemplars, "exemplars": [e.eid for e in shots],
                  "excluded_exemplars": excluded, "members": members, "vote": result}
        return tuple(result["answer"].split(",")) if result["answer"] else ()
