"""Run one (condition, question): build the clients, run the pipeline, always close, never raise.

A model failure becomes an error result that keeps every event recorded before it, so the
transcript shows how far the debate got.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, replace
from typing import Any

from medpanel.agents.model.backends import ClientFactory, ModelSpec, RawClient, build_client
from medpanel.agents.model.cache import ResponseCache, StorageFailure
from medpanel.agents.model.client import Gate, Hook, ModelCallError, QuestionSession, RunHalted
from medpanel.agents.model.limits import RateLimits
from medpanel.agents.model.replay import Replay
from medpanel.agents.model.route import RoleRoute
from medpanel.agents.pipelines.base import PipelineSettings, SomePipeline
from medpanel.agents.pipelines.registry import get_pipeline
from medpanel.agents.plan import ConditionPlan
from medpanel.agents.prompting import prompt_overrides
from medpanel.agents.types import Condition, Question, QuestionResult, TranscriptEvent, score


class ClientPool:
    """The raw clients one worker shares across the questions it runs on one event loop.

    Building an OpenAI client (an httpx pool) and opening its first connection cost milliseconds a
    question, which the runner's overhead per model call shows directly. A worker keeps one client
    per model spec (repeats differ by seed) with its connections alive, and closes them at the end.
    HTTP backends only: a scripted client may keep per-question state.
    """

    def __init__(self) -> None:
        self._clients: dict[str, RawClient] = {}
        self._last: tuple[ModelSpec, str | None, RawClient] | None = None
        """The last spec asked for and its client: a run's questions pass the plan's one spec
        object, found by identity without serialising it (5 us, once a question) for the key."""

    def get(self, spec: ModelSpec, base_url: str | None) -> RawClient | None:
        if spec.backend == "scripted":
            return None
        last = self._last
        if last is not None and last[0] is spec and last[1] == base_url:
            return last[2]
        key = f"{base_url}|{spec.model_dump_json()}"
        if key not in self._clients:
            self._clients[key] = build_client(spec, base_url=base_url)
        client = self._clients[key]
        # Held, so the spec cannot be collected and another object take its id; a spec is never
        # changed in place (`model_copy` makes the repeats' and routes' own).
        self._last = (spec, base_url, client)
        return client

    async def close(self) -> None:
        clients, self._clients, self._last = list(self._clients.values()), {}, None
        for client in clients:
            await client.close()


@dataclass(frozen=True)
class Route:
    """A role routed to another model (`roles:`): its label, its settings, and what gates its calls."""

    label: str
    spec: ModelSpec
    base_url: str | None = None
    before_call: Gate | None = None


@dataclass(frozen=True)
class Resolved:
    """One condition ready to run: its pipeline, the settings validated, the condition planned.

    A run resolves each condition once, in planning (`experiments/run/scenario/plan.py`), and every question
    of the condition reuses it: no lookup or validation per question."""

    pipeline: SomePipeline
    settings: PipelineSettings
    plan: ConditionPlan

    def with_budget(self, budget: dict[str, object]) -> Resolved:
        """This condition with one question's compute budget (`budget_match`)."""
        return replace(self, settings=self.pipeline.with_budget(self.settings, budget))


def resolve(condition: Condition) -> Resolved:
    """Look the pipeline up, validate the settings and plan the condition (for a single question; a
    run does this once per condition in planning)."""
    pipeline = get_pipeline(condition.pipeline)
    settings = pipeline.settings_model.model_validate(condition.settings)
    return Resolved(pipeline, settings, pipeline.plan(condition, settings))


async def run_question(condition: Condition, question: Question, spec: ModelSpec, **options: Any) -> QuestionResult:
    """`run_resolved` for a condition not planned yet (tests, `medpanel.run` of one question)."""
    return await run_resolved(resolve(condition), question, spec, **options)


async def run_resolved(
    resolved: Resolved,
    question: Question,
    spec: ModelSpec,
    *,
    base_url: str | None = None,
    cache: ResponseCache | None = None,
    repeat: int = 0,
    scoring: str = "exact_set",
    hooks: list[Hook] | None = None,
    client_factory: ClientFactory | None = None,
    before_call: Gate | None = None,
    clients: ClientPool | None = None,
    label: str | None = None,
    routes: dict[str, Route] | None = None,
    prompts: dict[str, str] | None = None,
    limits: RateLimits | None = None,
    replay: Replay | None = None,
) -> QuestionResult:
    """Raises `RunHalted` when the run is halted mid-question and `StorageFailure` when the run's
    cache cannot be written; anything else becomes an error result."""
    pipeline, settings, plan = resolved.pipeline, resolved.settings, resolved.plan
    if repeat:
        # Repeats differ by seed only, so a repeat is a fresh sample of the same configuration.
        spec = spec.model_copy(update={"seed": (spec.seed or 0) + repeat})
    shared = clients.get(spec, base_url) if clients is not None and client_factory is None else None
    inner = shared or (client_factory(spec) if client_factory else build_client(spec, base_url=base_url))
    own: list[RawClient] = [] if shared is not None else [inner]
    role_routes: dict[str, RoleRoute] = {}
    for role, route in (routes or {}).items():
        rspec = route.spec.model_copy(update={"seed": (route.spec.seed or 0) + repeat}) if repeat else route.spec
        pooled = clients.get(rspec, route.base_url) if clients is not None and client_factory is None else None
        rinner = pooled or (client_factory(rspec) if client_factory else build_client(rspec, base_url=route.base_url))
        if pooled is None:
            own.append(rinner)
        role_routes[role] = RoleRoute(route.label, rspec, rinner, route.before_call)
    session = QuestionSession(spec=spec, inner=inner, base_url=base_url, cache=cache, hooks=list(hooks or []),
                              before_call=before_call, limits=limits, replay=replay,
                              namespace=plan.slug if spec.cache == "condition" else None,
                              label=label, routes=role_routes)
    result = QuestionResult(condition=plan.slug, dataset=question.dataset, qid=question.qid,
                            gold=question.gold, repeat=repeat)
    try:
        with prompt_overrides(prompts or {}):
            outcome = await pipeline(question, plan, session, settings)
        screened = sum(1 for e in session.events if e.data.get("answer_leak"))
        if screened:  # the report's protocol line gives each condition's rate
            outcome.summary.critiques_screened = screened
        result.answer = outcome.answer
        result.invalid = outcome.invalid
        result.summary = outcome.summary.data()
        result.summary_version = outcome.summary.FORMAT_VERSION
        result.correct = not outcome.invalid and score(outcome.answer, question.gold, scoring)
    except (RunHalted, StorageFailure):
        raise  # not the question's failure: the runner stops the run and the pair is redone
    except ModelCallError as exc:
        result.error, result.error_kind = str(exc), exc.kind
    except Exception as exc:  # a bug in a pipeline must not take the run down; it is recorded
        result.error, result.error_kind = f"{type(exc).__name__}: {exc}", "internal"
        session.record(TranscriptEvent(kind="error", role="pipeline", agent="runner", step="exception",
                                       content=traceback.format_exc()[-4000:]))
    finally:
        for client in own:
            await client.close()
    result.events = session.events
    return result
