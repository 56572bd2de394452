"""CLEAR: cross-source evidence adjudication, with its baselines and variants as named conditions.

One pipeline, `clear`, runs every condition of the paper's Tables 1, 4 and 5 so they can share one
run (and its paired statistics and response cache):

| condition           | what runs                                                                 |
|---------------------|---------------------------------------------------------------------------|
| `direct`            | the parametric pathway alone                                              |
| `rag-bm25`          | the local pathway alone, BM25 (MedRAG-style)                              |
| `rag-dense`         | the local pathway alone, dense retrieval (needs a dense ingest)           |
| `online`            | the dynamic pathway alone (with source-quality tiers)                     |
| `clear-default`     | three pathways, verifier, guard, audit, follow-up, task adapter (no variant = this) |
| `clear-dual`        | as default; a second model (`assessor_model`) assesses the dynamic evidence |
| `clear-qpis`        | as default; the dynamic pathway plans sub-queries and searches iteratively |
| `clear-no-followup` | as default with `follow_up: false` (the Table 5 ablation)                 |

MCQ decisions pass the format gate; free-text questions (no options) get a response written from
the decision, and a rubric grade when `rubric_file` holds their rubric. The decision object is
always the transcript's last event: kind `decision`, role `verifier` (role `pipeline` for the
baselines), with the answer, route, rationale, confidence, guard, audit and the final bundle.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from medpanel.agents.events import Ruling
from medpanel.agents.freetext import files as freetext_files
from medpanel.agents.freetext.medrbench import MedRCase
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines.base import Outcome, Pipeline
from medpanel.agents.plan import ConditionPlan
from medpanel.agents.types import Condition, Question, TranscriptEvent
from medpanel.methods.clear.adjudication import Decision, adjudicate
from medpanel.methods.clear.bundle import Candidate
from medpanel.methods.clear.gate import format_gate
from medpanel.methods.clear.healthbench import REPORTED_TAGS
from medpanel.methods.clear.paper_tables import PAPER_TABLES
from medpanel.methods.clear.pathways import Context, dynamic, dynamic_documents, local
from medpanel.methods.clear.pathways import parametric as parametric_pathway
from medpanel.methods.clear.roles import grader as grading
from medpanel.methods.clear.roles import medrjudge, responder
from medpanel.methods.clear.settings import MODES, ClearSettings, Mode, mode_of
from medpanel.methods.clear.summary import ClearSummary, clear_facts, tier_facts
from medpanel.methods.clear.tables import CLEAR_TABLES
from medpanel.retrieval.errors import SourceConfigError
from medpanel.retrieval.search import check_separate
from medpanel.retrieval.sources import Source, SourceSpec, open_source, source_class

SourceFactory = Callable[[ClearSettings, str], object]
"""(settings, kind or retriever) -> an object with `.search(query, k) -> list[Evidence]`."""


def _local(settings: ClearSettings, retriever: str) -> Source:
    return open_source(settings.local_spec(retriever))


def _web(settings: ClearSettings, _kind: str) -> Source:
    return open_source(settings.web_spec())


@asynccontextmanager
async def side_session(session: QuestionSession, spec: ModelSpec | None) -> AsyncIterator[QuestionSession]:
    """A session for a second model whose calls land in the same transcript, cache and hooks.

    A scripted second model reuses the trial's scripted client (tests answer per role); any other
    backend gets its own client, closed afterwards. `local` shares the embedded server's URL.
    """
    if spec is None:
        yield session
        return
    # The backends (aiohttp's client) are imported by a run that calls a second model, not at the
    # start-up of every reader of the pipeline registry (`medpanel report` lists each pipeline's tables).
    from medpanel.agents.model.backends import build_client

    own = not (spec.backend == "scripted" and session.spec.backend == "scripted")
    url = session.base_url if spec.backend == "local" else None
    inner = build_client(spec, base_url=url) if own else session.inner
    side = QuestionSession(spec=spec, inner=inner, base_url=url, cache=session.cache, events=session.events,
                           hooks=session.hooks, namespace=session.namespace)
    try:
        yield side
    finally:
        if own:
            await inner.close()


class ClearPlan(ConditionPlan):
    mode: Mode
    """What the condition runs: a baseline pathway, or the three pathways and the adjudication."""


class ClearPipeline(Pipeline[ClearSettings, ClearPlan]):
    settings_model = ClearSettings
    plan_model = ClearPlan
    summary_model = ClearSummary
    variants = tuple(MODES)
    tables = (*CLEAR_TABLES, *PAPER_TABLES)  # the paper's tables after CLEAR's own, where a suite run has them

    def __init__(self, *, local_factory: SourceFactory | None = None,
                 dynamic_factory: SourceFactory | None = None) -> None:
        # Tests inject fake retrievers here; by default the retrieval layer's backends are used.
        self.local_factory: SourceFactory = local_factory or _local
        self.dynamic_factory: SourceFactory = dynamic_factory or _web
        self.real_sources = local_factory is None and dynamic_factory is None
        """Injected test doubles have no corpus whose documents could be compared, and open nothing."""

    def plan(self, condition: Condition, settings: ClearSettings) -> ClearPlan:
        variant = condition.flags.get("variant")
        return ClearPlan(slug=condition.slug, flags=condition.flags, variant=str(variant) if variant else None,
                         mode=mode_of(variant))

    def uses_verifier(self, plans: Sequence[ClearPlan], settings: ClearSettings) -> bool:
        return True

    def prepare(self, plans: Sequence[ClearPlan], settings: ClearSettings) -> None:
        """Open the corpora and the search backend once, so a missing one fails the run at once, and
        refuse an offline web that is (or shares documents with) the local corpus."""
        modes = [p.mode for p in plans]
        local_used = any(m.kind in ("rag", "clear") for m in modes)
        web_used = (any(m.kind in ("online", "clear") for m in modes)
                    and source_class(settings.dynamic_source).needs_corpus)
        if web_used:
            try:
                web = settings.snapshot_corpus
            except ValueError as exc:
                raise SourceConfigError(str(exc), field="settings.dynamic_corpus") from None
            if local_used and self.real_sources:
                check_separate(settings.corpus, web, field="settings.dynamic_corpus")
        if not self.real_sources:
            return
        for retriever in sorted({m.retriever or settings.retriever for m in modes if m.kind in ("rag", "clear")}):
            _local(settings, retriever).open()
        if any(m.kind in ("online", "clear") for m in modes):
            _web(settings, settings.dynamic_source).open()

    async def __call__(self, question: Question, plan: ClearPlan, session: QuestionSession,
                       settings: ClearSettings) -> Outcome:
        s: ClearSettings = settings.for_backend(session.spec)
        variant = plan.variant
        mode = plan.mode
        if mode.dual and s.assessor_model is None:
            raise ValueError("clear-dual needs a second model: set settings.assessor_model "
                             "(e.g. {backend: openai, name: ..., base_url: ...})")
        rubric = freetext_files.find_task(s.rubric_file, question) if s.rubric_file and not question.options else None
        searches_web = mode.kind in ("online", "clear")
        # MedRBench's treatment judge searches the web as the benchmark's does, when the run's web
        # backend is a live one; the same backend for every condition (the judge's, not the condition's).
        judge_kind = (medrjudge.live_web(s.dynamic_source)
                      if isinstance(rubric, MedRCase) and rubric.stage == "treatment" else None)
        judge_web = (judge_kind, self.dynamic_factory(s, s.dynamic_source)) if judge_kind else None
        async with side_session(session, s.assessor_model if mode.dual else None) as assessor, \
                side_session(session, s.grader_model if rubric is not None else None) as grader:
            ctx = Context(session=session, question=question, settings=s, mode=mode,
                          local=self.local_factory(s, mode.retriever or s.retriever),
                          # direct and rag-* never search the web, so they need no offline web corpus
                          dynamic=self.dynamic_factory(s, s.dynamic_source) if searches_web else None,
                          web=s.web_spec() if searches_web else SourceSpec(kind=s.dynamic_source),
                          assessor=assessor if mode.dual else None)
            summary = ClearSummary(mode=mode.kind, variant=str(variant or "clear-default"),
                                   web_source=s.dynamic_source if searches_web else None)
            if mode.kind == "clear":
                decision = await self._clear(ctx)
                return await self._finish(ctx, decision.answer, decision, summary, rubric, grader, judge_web)
            candidate = await self._baseline(ctx, mode)
            summary.pathway = candidate.pathway
            if candidate.pathway == "dynamic":
                summary.add(tier_facts(candidate.evidence))
            return await self._finish(ctx, candidate.answer, candidate, summary, rubric, grader, judge_web)

    async def _baseline(self, ctx: Context, mode: Mode) -> Candidate:
        if mode.kind == "direct":
            return await parametric_pathway(ctx)
        if mode.kind == "rag":
            return await local(ctx)
        docs, record = await dynamic_documents(ctx)
        return await dynamic(ctx, docs, record)

    async def _clear(self, ctx: Context) -> Decision:
        return await adjudicate(ctx, await parametric_pathway(ctx))

    async def _finish(self, ctx: Context, answer: tuple[str, ...] | None, basis: Decision | Candidate,
                      summary: ClearSummary, rubric: freetext_files.Task | None,
                      grader: QuestionSession, judge_web: tuple[str, Any] | None = None) -> Outcome:
        q, s = ctx.question, ctx.settings
        data: dict[str, object] = {}
        if isinstance(basis, Decision):
            summary.add(clear_facts(basis))
            data = {"route": basis.route, "rationale": basis.rationale, "confidence": basis.confidence,
                    "routes_history": basis.routes_history, "verdicts": [v.record() for v in basis.verdicts],
                    "guard": basis.guard, "audit": basis.audit, "follow_ups": basis.follow_ups,
                    "fallback_used": basis.fallback_used, "bundle": basis.bundle.record()}
            rationale, evidence = basis.rationale, [*basis.bundle.local[: s.verifier_local_docs],
                                                   *basis.bundle.dynamic]
        else:
            data = {"pathway": basis.pathway, "candidate": basis.record()}
            rationale, evidence = basis.reasoning, basis.evidence
        searches_before = len(ctx.searches)
        final: tuple[str, ...] = ()
        invalid = True
        if q.options:
            gate = format_gate(answer, q.options, q.multi_answer)
            ctx.session.record(TranscriptEvent(kind="note", role="format_gate", agent="format_gate",
                                               step="format_gate", content=",".join(gate.letters) or gate.reason,
                                               data=gate.record(),
                                               act=Ruling(rule="format_gate", outcome=gate.reason if not gate.valid
                                                          else "valid", intervened=not gate.valid)))
            final, invalid = gate.letters, not gate.valid
            data["format_gate"] = gate.record()
        else:
            response = None
            summary.rubric = rubric is not None
            if answer is not None:
                response = await responder.respond(ctx.session, q, conclusion=answer[0], rationale=rationale,
                                                  evidence=evidence, chars=s.verifier_passage_chars)
            invalid = response is None
            data["response"] = response
            summary.response_chars = len(response or "")
            if rubric is not None and response is not None:
                # The grader is shown the conversation (or case), the response and its rubric item or
                # reference: never the condition, the pipeline or the route that produced the response.
                graded = await (medrjudge.grade_case(grader, rubric, response, web=judge_web[1] if judge_web else None,
                                                     web_kind=judge_web[0] if judge_web else None)
                                if isinstance(rubric, MedRCase) else grading.grade(grader, rubric, response))
                data["grade"] = graded
                summary.rubric_score, summary.grade_valid = graded["score"], graded["valid"]
                summary.grade_kind = graded["kind"]
                if "support" in graded:  # MedRBench's treatment judge: web results, or the published analysis
                    summary.judge_support = (f"web:{graded['web_source']}" if graded["support"] == "web"
                                             else graded["support"])
                # The report's tags (theme, axis) only: the export flattens the summary into columns,
                # and HealthBench's cluster tags number in the dozens. All of them stay in data["grade"].
                tags = graded.get("tags") if graded["valid"] else None
                summary.tag_scores = ({k: v for k, v in tags.items() if k.startswith(REPORTED_TAGS)}
                                      if tags is not None else None)
            else:
                summary.rubric_score, summary.grade_valid = None, False
            # The adapter may not search: the decision's bundle is all the evidence it gets.
            data["adapter_searches"] = len(ctx.searches) - searches_before
        data["answer"] = list(final)
        content = ",".join(final) if q.options else (str(data.get("response") or "")[:200])
        if isinstance(basis, Decision):
            ctx.session.record(TranscriptEvent(kind="decision", role="verifier", agent="verifier", step="decision",
                                               content=content or "invalid", data=data))
        else:
            ctx.session.record(TranscriptEvent(kind="decision", role="pipeline", agent=summary.mode or "clear",
                                               step="decision", content=content or "invalid", data=data))
        return Outcome(answer=final, invalid=invalid, summary=summary)
