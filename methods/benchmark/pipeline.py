"""The benchmark context (the seed paper's Table 7): the single-model methods of MedAgentsBench and the
seed's own best conditions, as variants of one `benchmark` pipeline, so one run answers them all
on the same questions with one backend, cache and paired statistics.

Each method's default follows the benchmark's own code (`baselines/MedPrompt/*.py` of
MedAgentsBench, whose logged gpt-4o runs are the price anchors); where the original paper's method
differs, the original is a named variant. docs/methods/benchmark.md lists, per method, what follows
which and what still differs.

| variant             | calls / question (defaults)   | what it does                                       |
|---------------------|-------------------------------|----------------------------------------------------|
| `zero-shot`         | 1                             | `direct`'s prompt, reply capped at 512 tokens      |
| `few-shot`          | 1                             | zero-shot + `k_shots` solved exemplars             |
| `cot`               | 1                             | `cot`'s prompt, no reply cap                       |
| `cot-sc`            | `n_samples` + 1 (6)           | seeded CoT samples, a call aggregates their letters|
| `multipersona`      | 3 x `persona_rounds` + 1 (7)  | 3 fixed roles in separate calls, a final decision  |
| `spp`               | 3 + `persona_rounds` (5)      | Solo Performance Prompting in one conversation     |
| `self-refine`       | 1 + up to 3 x (review, revise)| stateless calls; the review sees the stem only     |
| `medprompt`         | 3 generations + 3 choices     | kNN examples (Q, A text), calls pick a solution    |
| `medprompt-shuffle` | `shuffles` (5)                | Nori et al.: kNN CoT exemplars, shuffled options   |
| `panel-*`, `generalist-between-gap`, `medagents`, `mdagents`, `kamac` | as those pipelines | their own pipelines |

`zero-shot`, `few-shot`, `cot`, `cot-sc`, `multipersona`, `self-refine` and `medprompt` are also
pipelines of their own (`pipeline: medprompt`).

**Reply caps** (`reply_caps`): `benchmark` (default) sends each call's `max_tokens` as the
benchmark's code does: 512 for zero-shot, none for every other call (the endpoint's own limit; its
gpt-4o CoT replies averaged 412 completion tokens), and an uncapped reply's reasoning field asks for
full-length reasoning; `model` caps every call at `model.max_tokens` and asks for brief reasoning
(short replies for a small local model). The seed's conditions and the multi-agent methods keep
`model.max_tokens`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import letters_of
from medpanel.agents.pipelines.base import Outcome, Pipeline, SomePipeline
from medpanel.agents.pipelines.registry import get_pipeline
from medpanel.agents.plan import ConditionPlan, PlanError
from medpanel.agents.roles import baseline
from medpanel.agents.roles.exemplars import ExemplarPool
from medpanel.agents.types import Condition, Question, TranscriptEvent
from medpanel.methods.baselines.pipeline import session_spent
from medpanel.methods.benchmark import flows
from medpanel.methods.benchmark.flows import BenchmarkSummary, permutation, shuffled
from medpanel.methods.benchmark.roles import benchmark
from medpanel.methods.benchmark.settings import BenchmarkSettings

Method = Literal["zero-shot", "few-shot", "cot", "cot-sc", "multipersona", "self-refine", "medprompt", "spp",
                 "medprompt-shuffle"]
METHODS: tuple[Method, ...] = ("zero-shot", "few-shot", "cot", "cot-sc", "multipersona", "self-refine", "medprompt")
"""The benchmark's single-model methods, each as its code runs it (a pipeline of its own too)."""
ORIGINALS: tuple[Method, ...] = ("spp", "medprompt-shuffle")
"""Named variants with the original papers' shape: MultiPersona as SPP, MedPrompt as Nori et al.'s ensemble."""
SINGLE: tuple[Method, ...] = (*METHODS, *ORIGINALS)
POOLED = ("few-shot", "medprompt", "medprompt-shuffle")
"""The methods that read the exemplar pool."""
ZERO_SHOT_CAP = 512
"""zero_shot.py lines 88-94: the one call of the benchmark's code that sets `max_tokens` (gpt-4o branch)."""
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
    # The papers' own repositories, where they differ from the benchmark's copies.
    "medagents-original": ("medagents", "original"),
    "mdagents-original": ("mdagents", "original"),
}


class BenchmarkPlan(ConditionPlan):
    method: str
    inner: dict[str, object] | None = None
    """For a seed condition: that pipeline's own plan (its `plan_model` dump)."""


INNER = ("panel", "generalist", "medagents", "mdagents", "kamac")
"""The pipelines whose default conditions are variants here, in the order they prepare. Each is reached
by its name through the registry, as a scenario's `pipeline:` is: the benchmark imports no other method."""


def _inner(name: str) -> SomePipeline:
    return get_pipeline(name)


def condition_for(slug: str, pipeline: str) -> Condition:
    """A seed condition's slug as its own pipeline reads it: `c1r0k1` -> flags, `between-gap` -> a variant,
    "" -> the pipeline's one condition (a published method)."""
    if not slug:
        return Condition(slug=pipeline, pipeline=pipeline, flags={})
    pairs = re.fullmatch(r"(?:[a-z]\d)+", slug)
    flags: dict[str, int | str] = ({m[0]: int(m[1]) for m in re.findall(r"[a-z]\d", slug)} if pairs
                                   else {"variant": slug})
    return Condition(slug=slug, pipeline=pipeline, flags=flags)


def reply_caps(method: str, settings: BenchmarkSettings) -> dict[str, object]:
    """The per-call override of `max_tokens` for `method`'s calls (every stage alike: the benchmark's code
    caps zero-shot's one call and no other). `{}` under `reply_caps: model` keeps `model.max_tokens`."""
    if settings.reply_caps == "model":
        return {}
    return {"max_tokens": ZERO_SHOT_CAP if method == "zero-shot" else None}


__all__ = [
    "METHODS",
    "ORIGINALS",
    "SEED_CONDITIONS",
    "BenchmarkPipeline",
    "BenchmarkSettings",
    "permutation",
    "reply_caps",
    "shuffled",
]


class BenchmarkPipeline(Pipeline[BenchmarkSettings, BenchmarkPlan]):
    settings_model = BenchmarkSettings
    plan_model = BenchmarkPlan
    summary_model = BenchmarkSummary

    def __init__(self, method: Method | None = None) -> None:
        self.method = method
        self.variants = () if method else (*SINGLE, *SEED_CONDITIONS)
        self.requires_variant = method is None
        self._pools: dict[str, ExemplarPool] = {}

    def plan(self, condition: Condition, settings: BenchmarkSettings) -> BenchmarkPlan:
        variant = condition.flags.get("variant")
        method = self.method or variant
        variant_s = str(variant) if variant is not None else None
        if method in SEED_CONDITIONS:
            name, slug = SEED_CONDITIONS[str(method)]
            inner = _inner(name)
            inner_settings = inner.settings_model.model_validate(settings.inner_settings(name))
            inner_cond = condition_for(slug, name)
            inner.check(inner_cond, name)
            inner_plan = inner.plan(inner_cond, inner_settings)
            return BenchmarkPlan(slug=condition.slug, flags=condition.flags, variant=variant_s, method=str(method),
                                 inner=inner_plan.model_dump(mode="json"))
        if method not in SINGLE:
            raise PlanError(f"pipeline benchmark needs a variant, one of {', '.join((*SINGLE, *SEED_CONDITIONS))}; "
                            f"got {variant!r}", field="variants")
        if method in POOLED:
            self.pool(settings.exemplars)  # a missing, malformed or test-split pool fails in planning
        return BenchmarkPlan(slug=condition.slug, flags=condition.flags, variant=variant_s, method=str(method))

    def prepare(self, plans: Sequence[BenchmarkPlan], settings: BenchmarkSettings) -> None:
        if any(p.method in POOLED for p in plans):
            self.pool(settings.exemplars)
        for name in INNER:
            inner_plans = [p for p in plans if p.inner is not None and SEED_CONDITIONS[p.method][0] == name]
            if inner_plans:
                inner = _inner(name)
                inner.prepare([inner.plan_model.model_validate(p.inner) for p in inner_plans],
                              inner.settings_model.model_validate(settings.inner_settings(name)))

    def pool(self, source: str) -> ExemplarPool:
        # A worker that did not run `prepare` (a resumed shard) loads the pool on first use.
        if source not in self._pools:
            self._pools[source] = ExemplarPool(source)
        return self._pools[source]

    async def __call__(self, question: Question, plan: BenchmarkPlan, session: QuestionSession,
                       settings: BenchmarkSettings) -> Outcome:
        out = await self._answer(question, plan, session, settings)
        # What the method asks for, cache hits and re-asks included: its price run on its own. In a
        # shared-cache run the tokens sent understate a method whose requests another one also makes.
        calls, tokens = session_spent(session)
        out.summary.requested_calls, out.summary.requested_tokens = calls, tokens
        return out

    async def _answer(self, question: Question, plan: BenchmarkPlan, session: QuestionSession,
                      settings: BenchmarkSettings) -> Outcome:
        method = plan.method
        if plan.inner is not None:
            name = SEED_CONDITIONS[method][0]
            inner = _inner(name)
            return await inner(question, inner.plan_model.model_validate(plan.inner), session,
                               inner.settings_model.model_validate(settings.inner_settings(name)))
        facts = BenchmarkSummary(method=method)
        caps = reply_caps(str(method), settings)
        if method in ("zero-shot", "cot"):
            parsed = await baseline.answer(session, question, "direct" if method == "zero-shot" else "cot", caps)
            answer = letters_of(parsed) if parsed is not None else ()
        elif method == "few-shot":
            pool = self.pool(settings.exemplars)
            shots, excluded = pool.first(question, settings.k_shots)
            facts.exemplar_source, facts.exemplars = settings.exemplars, [e.eid for e in shots]
            facts.excluded_exemplars = excluded
            parsed = await benchmark.few_shot(session, question, shots, caps)
            answer = letters_of(parsed) if parsed is not None else ()
        elif method == "cot-sc":
            answer = await flows.cot_sc(question, session, settings, caps, facts)
        elif method == "multipersona":
            answer = await flows.multipersona_debate(question, session, settings, caps, facts)
        elif method == "spp":
            answer = await flows.spp(question, session, settings, caps, facts)
        elif method == "self-refine":
            answer = await flows.self_refine(question, session, settings, caps, facts)
        elif method == "medprompt":
            answer = await flows.medprompt(question, session, settings, self.pool(settings.exemplars), caps, facts)
        else:
            answer = await flows.medprompt_shuffle(question, session, settings, self.pool(settings.exemplars), caps,
                                                   facts)
        session.record(TranscriptEvent(kind="decision", role="pipeline", agent=method, step="final",
                                       content=",".join(answer) or "invalid", data={"answer": list(answer)}))
        return Outcome(answer=answer, invalid=not answer, summary=facts)
