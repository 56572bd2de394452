"""Single-model baselines, the controls the panel's gains are measured against.

| pipeline / variant | what it does                                                               |
|--------------------|----------------------------------------------------------------------------|
| `direct`           | zero-shot: one call, the answer letter only (no reasoning field)           |
| `cot`              | chain of thought: one call, reasoning first, then the answer               |
| `sc`               | self-consistency: chain-of-thought samples at `temperature` > 0, majority  |

Each is registered as its own pipeline (`pipeline: sc`), and all three are variants of the
`baseline` pipeline (`pipeline: baseline, variants: [direct, cot, sc]`), so one run can hold them
side by side with a shared cache and paired statistics. Slugs are `direct`, `cot`, `sc` either way.

**Self-consistency.** Sample `i` (0-based) is a fresh agent (it sees no other sample) whose calls
carry `seed = base + i * SEED_STRIDE` and `temperature = settings.temperature` as per-call
overrides (`RecordingClient.overrides`), so every sample is a distinct request and the response
cache cannot collapse them. `base` is the model seed of this repeat (scenario seed + repeat); the
stride keeps the samples of different repeats apart (with `base + i`, repeat 1's sample 0 would be
repeat 0's sample 1). A sample whose reply is still invalid after the re-ask is recorded and does
not vote. The answer is the majority over the valid samples' answers (a multi-answer item votes with
its whole letter set). **Tie rule:** among the tied answers, the one that reached the winning count
first in sample order wins (samples B, A, A, B: A reaches two at sample 3, B at sample 4, so A);
the tally is `tally.vote`, the rule every majority vote of medpanel's uses. The vote, its counts and
the rule used are recorded. No valid sample: the question is invalid.

**Budget** (`settings.budget`, set per question by the runner from a scenario's `budget_match`):
instead of `n_samples`, samples are drawn until the calls (or tokens) this question has spent reach
`budget.target`. Calls and tokens are counted as `QuestionResult.logical_calls` counts calls: every
request asked for, re-asks and cache hits included (a cache hit's tokens are its recorded usage), the
measure the reference condition's target was taken in. A sample is never cut short, so the spend is
the target exactly in calls unless the last sample needed a re-ask (one over), and in tokens at most
one sample over. `direct` and `cot` make one fixed call and refuse a budget.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from medpanel.agents.events import Vote
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.structured import letters_of
from medpanel.agents.pipelines.base import Outcome, Pipeline, PipelineSettings
from medpanel.agents.pipelines.tally import vote
from medpanel.agents.plan import ConditionPlan, PlanError
from medpanel.agents.roles import baseline
from medpanel.agents.summary import BudgetSpent, Fact, Summary
from medpanel.agents.types import Condition, Question, TranscriptEvent

Kind = Literal["direct", "cot", "sc"]
KINDS: tuple[Kind, ...] = ("direct", "cot", "sc")
SEED_STRIDE = 1000
"""Sample i's seed is base + i * SEED_STRIDE: distinct across samples and across up to 1,000 repeats."""


class SampleBudget(BaseModel):
    """What a sampling baseline may spend on one question (from `budget_match`, or set by hand)."""

    model_config = ConfigDict(extra="forbid")

    by: Literal["calls", "tokens"] = "calls"
    target: int = Field(ge=0)
    reference: dict[str, object] = Field(default_factory=dict)
    """Where the target came from (run, condition, its calls and tokens); copied into the summary."""


class BaselineSettings(PipelineSettings):
    n_samples: int = Field(default=5, ge=1, le=SEED_STRIDE)
    """`sc` only: samples per question when no budget is set."""
    temperature: float = Field(default=0.7, gt=0.0, le=2.0)
    """`sc` only: sampling temperature of every sample (the model's own temperature is not used)."""
    max_samples: int = Field(default=256, ge=1, le=SEED_STRIDE)
    """`sc` only: a hard cap on samples under a budget, so a bad target cannot loop for ever."""
    budget: SampleBudget | None = None
    """`sc` only: spend this much per question instead of `n_samples`; budget_match sets it."""


def session_spent(session: QuestionSession) -> tuple[int, int]:
    """(calls, tokens) this question has asked for so far, cache hits and re-asks included."""
    calls = [e for e in session.events if e.kind == "call"]
    return sum(e.attempts for e in calls), sum(e.usage.total for e in calls)


class BaselinePlan(ConditionPlan):
    kind: Kind


class Sample(Fact):
    """One self-consistency sample: its seed, its answer (None when invalid) and what it spent."""

    i: int
    seed: int
    temperature: float
    answer: list[str] | None
    valid: bool
    calls: int
    tokens: int


class SampleVote(Fact):
    """The majority over the valid samples (`vote`)."""

    answer: str | None
    counts: dict[str, int]
    rule: str
    tied: list[str]


class BaselineSummary(Summary):
    method: str | None = None
    n_samples: int | None = None
    temperature: float | None = None
    valid_samples: int | None = None
    invalid_samples: int | None = None
    samples: list[Sample] | None = None
    vote: SampleVote | None = None


class BaselinePipeline(Pipeline[BaselineSettings, BaselinePlan]):
    settings_model = BaselineSettings
    plan_model = BaselinePlan
    summary_model = BaselineSummary

    def __init__(self, kind: Kind | None = None) -> None:
        self.kind = kind
        # The `baseline` pipeline holds all three as variants; `direct`, `cot`, `sc` are one each.
        self.variants = () if kind else KINDS
        self.requires_variant = kind is None

    def plan(self, condition: Condition, settings: BaselineSettings) -> BaselinePlan:
        variant = condition.flags.get("variant")
        kind = self.kind or variant
        if kind not in KINDS:  # `check` refuses these in planning; a hand-built condition meets it here
            raise PlanError(f"pipeline baseline needs a variant, one of {', '.join(KINDS)}; got {variant!r}",
                            field="variants")
        return BaselinePlan(slug=condition.slug, flags=condition.flags, variant=str(variant) if variant else None,
                            kind=kind)

    def accepts_budget(self, plan: BaselinePlan) -> bool:
        """Only self-consistency can spend a given budget; direct and cot make one fixed call."""
        return plan.kind == "sc"

    def with_budget(self, settings: BaselineSettings, budget: dict[str, object]) -> BaselineSettings:
        return settings.model_copy(update={"budget": SampleBudget.model_validate(budget)})

    async def __call__(self, question: Question, plan: BaselinePlan, session: QuestionSession,
                       settings: BaselineSettings) -> Outcome:
        kind = plan.kind
        if kind != "sc" and settings.budget is not None:
            raise ValueError(f"{kind} makes one fixed call per question and cannot spend a budget")
        if kind == "sc":
            return await self._self_consistency(question, session, settings)
        parsed = await baseline.answer(session, question, kind)
        answer = letters_of(parsed) if parsed is not None else ()
        session.record(TranscriptEvent(kind="decision", role="pipeline", agent=kind, step="final",
                                       content=",".join(answer) or "invalid", data={"answer": list(answer)}))
        return Outcome(answer=answer, invalid=not answer, summary=BaselineSummary(method=kind))

    async def _self_consistency(self, question: Question, session: QuestionSession, settings: BaselineSettings,
                                *, overrides: dict[str, object] | None = None, decide: bool = True) -> Outcome:
        # `overrides` (a reply cap) and `decide=False` are for CoT-SC, which sends these samples and
        # then decides by an aggregation call of its own (methods/benchmark/flows.py).
        base = session.spec.seed or 0
        budget = settings.budget
        samples: list[Sample] = []
        answers: list[tuple[str, ...] | None] = []
        capped = False

        def more() -> bool:
            nonlocal capped
            if budget is None:
                return len(samples) < settings.n_samples
            calls, tokens = session_spent(session)
            if (calls if budget.by == "calls" else tokens) >= budget.target:
                return False
            capped = len(samples) >= settings.max_samples
            return not capped

        while more():
            i = len(samples)
            seed = base + i * SEED_STRIDE
            before = session_spent(session)
            parsed = await baseline.sample(session, question, i=i, seed=seed, temperature=settings.temperature,
                                           overrides=overrides)
            after = session_spent(session)
            answer = letters_of(parsed) if parsed is not None else None
            answers.append(answer)
            samples.append(Sample(i=i, seed=seed, temperature=settings.temperature,
                                  answer=list(answer) if answer else None, valid=answer is not None,
                                  calls=after[0] - before[0], tokens=after[1] - before[1]))
        result = vote(answers)
        # Without `decide` the majority is a note: the caller's own decision is the question's answer.
        session.record(TranscriptEvent(kind="vote" if decide else "note", role="pipeline", agent="sc",
                                       step="vote" if decide else "majority", content=result["answer"] or "invalid",
                                       data={**result, "samples": [s.answer for s in samples]},
                                       act=Vote.of(result) if decide else None))
        final = tuple(result["answer"].split(",")) if result["answer"] else ()
        if decide:
            session.record(TranscriptEvent(kind="decision", role="pipeline", agent="sc", step="final",
                                           content=",".join(final) or "invalid",
                                           data={"answer": list(final), "rule": result["rule"]}))
        summary = BaselineSummary(
            method="sc", n_samples=len(samples), temperature=settings.temperature,
            valid_samples=sum(s.valid for s in samples),
            invalid_samples=sum(not s.valid for s in samples),
            samples=samples, vote=SampleVote(**result),
        )
        if budget is not None:
            calls, tokens = session_spent(session)
            summary.budget = BudgetSpent(by=budget.by, target=budget.target, reference=budget.reference,
                                         spent_calls=calls, spent_tokens=tokens, capped=capped)
        return Outcome(answer=final, invalid=not final, summary=summary)
