"""Real run directories for the viewer, plots, compare/export and leakage tests.

`grid_run` runs the panel pipeline's c/r 2x2 grid on a scripted model whose specialists write a
`<script>` tag into their reasoning (and one question stem carries an `<img onerror>`), so the
viewer's escaping is tested on what a model and a dataset really produce. `clear_run` writes a
CLEAR-shaped run through the real store: Knowledge Gate, curator evidence brief (with a planted
`<script>` passage, a `javascript:` URL and a leaked stem), verifier route/candidates/guard/audit,
an unknown role and a final vote, so future pipelines' events are rendered before they exist.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_cache import responder as bench_responder
from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest, synthesize
from medpanel.agents.types import Condition, Question, QuestionResult, TranscriptEvent, Usage
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import Plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.store import Store
from medpanel.methods.panel.roles.challenger import Critique
from medpanel.methods.panel.roles.recruiter import RecruitCheck
from medpanel.methods.panel.roles.selector import TeamChoice

XSS = "<script>alert(1)</script>"
XSS_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
IMG_XSS = '<img src=x onerror="alert(2)">'

STEM = ("A 24-year-old woman comes to the physician because of palpitations, heat intolerance, and a 5-kg "
        "weight loss over 2 months despite a good appetite. Examination shows a fine tremor of the hands, a "
        "diffusely enlarged nontender thyroid gland, and bilateral proptosis. Serum TSH is undetectable and free "
        "T4 is elevated. Which of the following is the most likely diagnosis?")
OPTIONS = {"A": "Graves disease", "B": "Hashimoto thyroiditis", "C": "Toxic multinodular goiter",
           "D": "Subacute granulomatous thyroiditis"}

GRID_QUESTIONS = [
    Question(dataset="medqa", qid="t1", text=STEM, options=OPTIONS, gold=("A",)),
    Question(dataset="medqa", qid="t2", text=f"A 58-year-old man has chest pain {IMG_XSS}. Which artery?",
             options={"A": "Left anterior descending", "B": "Left circumflex", "C": "Right coronary"}, gold=("C",)),
    Question(dataset="pubmedqa", qid="p1", text="Does aspirin reduce colorectal adenoma recurrence?",
             options={"A": "yes", "B": "no", "C": "maybe"}, gold=("A",)),
]


def _grid_responder() -> Any:
    base = bench_responder(weakness=0.6, need=0.35)

    def respond(r: ScriptedRequest) -> Any:
        if r.model in (Critique, RecruitCheck, TeamChoice):
            return base(r)
        assert r.model is not None
        reply = synthesize(r.model, json.dumps(r.messages, sort_keys=True))
        if "reasoning" in reply:
            reply["reasoning"] = f"I considered {XSS} and the options."
        return reply

    return respond


def grid_run(base: Path, *, questions: list[Question] | None = None, name: str = "grid",
             responder: Any = None, pipeline: str = "panel", flags: dict[str, list[int]] | None = None) -> Path:
    """Run a scripted grid for real (runner, store, cache) and return its directory."""
    flags = flags or {"c": [0, 1], "r": [0, 1]}
    scenario = Scenario(name=name, pipeline=pipeline, flags=flags, model={"backend": "scripted"},
                        run={"workers": 2})
    qs = questions or GRID_QUESTIONS
    plan = Plan(scenario=scenario, conditions=scenario.conditions(), questions=qs, repeats=1, shard_size=4)
    runner = Runner.create(plan, run_dir=base / name)
    respond = responder or _grid_responder()
    runner.client_factory = lambda spec: ScriptedChatCompletionClient(respond)
    status = runner.run(install_signals=False)
    assert status["state"] == "complete", status
    return runner.run_dir


# -- a CLEAR-shaped run written through the store ----------------------------------------------

LEAK_PASSAGE = ("Board review item. " + STEM + " Answer choices follow in the original item.")
SAFE_URL = "https://pubmed.ncbi.nlm.nih.gov/10808977/"


def _call(role: str, agent: str, step: str, parsed: dict[str, Any] | None, **kw: Any) -> TranscriptEvent:
    content = kw.pop("content", json.dumps(parsed) if parsed is not None else "")
    return TranscriptEvent(kind="call", role=role, agent=agent, step=step, parsed=parsed, content=content,
                           usage=Usage(prompt_tokens=120, completion_tokens=30), latency_s=0.25, model="scripted",
                           messages=[{"role": "system", "content": "You are careful."},
                                     {"role": "user", "content": f"Question: {STEM}"}], **kw)


def clear_events(web: bool) -> list[TranscriptEvent]:
    evidence = [
        {"doc_id": "PMID:10808977", "title": f"Passage title {XSS}", "url": SAFE_URL, "source": "pubmed",
         "year": 2000, "quality": "high", "text": f"Thyroid storm overview. {XSS} Radioiodine uptake is diffuse.",
         "score": 0.91},
        {"doc_id": "web-2", "title": "Evil link", "url": "javascript:alert(3)", "source": "web", "year": None,
         "quality": "low", "text": "Benign text about goiter.", "score": 0.5},
    ]
    if web:
        evidence.append({"doc_id": "web-3", "title": "Leaked item", "url": "https://example.org/q", "source": "web",
                         "year": 2021, "quality": "low", "text": LEAK_PASSAGE, "score": 0.4})
    return [
        _call("knowledge_gate", "gate", "gate", {"fire": True, "query": "graves disease proptosis diagnosis"},
              data={"query": "graves disease proptosis diagnosis", "fired": True}),
        TranscriptEvent(kind="note", role="curator", agent="curator", step="brief", content="evidence brief",
                        data={"evidence": evidence, "received_by": ["endocrinologist", "internist"]}),
        _call("specialist", "endocrinologist", "turn", {"reasoning": f"Proptosis {XSS} suggests Graves.",
                                                         "answer": "A"}, round=1, turn=1),
        _call("verifier", "verifier", "verify", {"route": "web" if web else "parametric", "answer": "A"},
              data={"route": "web" if web else "parametric", "rationale": "Sources agree on Graves disease.",
                    "candidates": [{"letter": "A", "support": 2}, {"letter": "C", "support": 0}],
                    "guard": {"passed": True, "checks": ["format", "letters"]}, "audit": {"conflicts": 0}}),
        TranscriptEvent(kind="note", role="oracle", agent="oracle-7", step="mystery", content="unknown step",
                        data={"foo": {"bar": [1, 2]}, "note": "rendered generically"}),
        TranscriptEvent(kind="vote", role="moderator", agent="moderator", step="final", content="A",
                        data={"votes": {"endocrinologist": "A"}, "counts": {"A": 1}, "rule": "verifier"}),
    ]


def clear_run(base: Path, name: str = "clear") -> Path:
    conds = [Condition(slug="clear-noweb", pipeline="generalist", flags={"web": 0}),
             Condition(slug="clear-default", pipeline="generalist", flags={"web": 1})]
    scenario = Scenario(name=name, pipeline="generalist", model={"backend": "scripted"},
                        compare=[("clear-noweb", "clear-default")])
    questions = [GRID_QUESTIONS[0], Question(dataset="pubmedqa", qid="p9", text="Do statins help? " + XSS,
                                             options={"A": "yes", "B": "no", "C": "maybe"}, gold=("B",))]
    plan = Plan(scenario=scenario, conditions=conds, questions=questions, repeats=1, shard_size=4)
    runner = Runner.create(plan, run_dir=base / name)
    store = Store(runner.storage_url, runner.run_dir)
    for cond in conds:
        web = cond.slug == "clear-default"
        for q in questions:
            result = QuestionResult(condition=cond.slug, dataset=q.dataset, qid=q.qid, answer=("A",), gold=q.gold,
                                    correct=q.gold == ("A",), events=clear_events(web),
                                    summary={"route": "web" if web else "parametric", "gate_fired": True})
            assert store.claim((cond.slug, q.dataset, q.qid, 0), "test")
            store.commit(result, q, "test")
    store.close()
    (runner.run_dir / "status.json").write_text(json.dumps({"state": "complete", "remaining": 0,
                                                            "updated": time.strftime("%Y-%m-%d")}))
    return runner.run_dir


# -- a real CLEAR run: the `clear` pipeline end to end, with fixed search results -----------------


class _FixedSearch:
    def __init__(self, results: list[Any]) -> None:
        self.results = results

    def search(self, query: str, k: int) -> list[Any]:
        return self.results[:k]


def real_clear_run(base: Path, name: str = "clear-real") -> Path:
    """The `clear` pipeline's four MCQ variants through the runner; the scripted model answers every
    step with a schema-valid reply, local and web search return fixed passages (one carries XSS)."""
    import pytest

    from medpanel.agents.pipelines.registry import PIPELINES
    from medpanel.methods.clear.pipeline import ClearPipeline
    from medpanel.retrieval.evidence import Evidence

    local = [Evidence(text="Graves disease causes diffuse goiter and ophthalmopathy.", title="Graves", doc_id="L-1",
                      source="unit", score=3.0, retriever="bm25", rank=1)]
    web = [Evidence(text=f"Thyrotoxicosis review {XSS}", title="NIH thyroid", doc_id="W-1", source="web",
                    url="https://www.nih.gov/thyroid", score=1.0, retriever="snapshot", rank=1),
           Evidence(text="Blog post on goiter.", title="Blog", doc_id="W-2", source="web",
                    url="https://blog.example.com/goiter", score=0.5, retriever="snapshot", rank=2)]
    scenario = Scenario(name=name, pipeline="clear", variants=["direct", "rag-bm25", "online", "clear-default"],
                        compare=[("direct", "clear-default"), ("online", "clear-default")],
                        model={"backend": "scripted"}, run={"workers": 2})
    plan = Plan(scenario=scenario, conditions=scenario.conditions(), questions=GRID_QUESTIONS[:2], repeats=1,
                shard_size=4)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(PIPELINES, "clear", lambda: ClearPipeline(local_factory=lambda s, r: _FixedSearch(local),
                                                             dynamic_factory=lambda s, k: _FixedSearch(web)))
        runner = Runner.create(plan, run_dir=base / name)
        runner.client_factory = lambda spec: ScriptedChatCompletionClient()
        status = runner.run(install_signals=False)
    assert status["state"] == "complete", status
    return runner.run_dir


def run_rows(run_dir: Path) -> list:
    """The result rows of a SQLite run directory (shared by the viewer and leakage tests)."""
    store = Store(f"sqlite:///{run_dir / 'study.db'}", run_dir)
    try:
        return store.rows()
    finally:
        store.close()


# -- a grid whose Challenger, specialists and moderator write tokens found nowhere else ------------

TOKEN_SPECIALTY = "Vexillologist"
"""The one specialty the selector seats; no prompt or dataset names it."""
CRITIQUE_TOKEN = "quokka-critique-7Q2"
TURN_TOKEN = "wombat-turn-4K9"
TOKEN_ANSWER = "C"


def token_responder() -> Any:
    """Replies that carry unique tokens: each Challenger critique names `CRITIQUE_TOKEN`, each specialist
    turn `TURN_TOKEN` with its agent, round and turn; every specialist answers `TOKEN_ANSWER`, so the
    moderator's decision is unanimous."""

    def respond(r: ScriptedRequest) -> Any:
        if r.model is TeamChoice:
            return {"specialists": [{"role": TOKEN_SPECIALTY, "expertise": "flags"},
                                    {"role": "Cardiologist", "expertise": "hearts"}]}
        if r.model is Critique:
            return {"material_weakness": True, "gap_type": "missing_differential",
                    "challenge": f"Reconsider the differential {CRITIQUE_TOKEN}."}
        if r.model is RecruitCheck:
            return {"needed": False, "specialty": "", "reason": ""}
        assert r.model is not None
        reply = synthesize(r.model, json.dumps(r.messages, sort_keys=True))
        if "reasoning" in reply:
            reply["reasoning"] = f"{TURN_TOKEN} {r.tag.agent} r{r.tag.round}t{r.tag.turn}"
        if "answer" in reply:
            reply["answer"] = TOKEN_ANSWER
        return reply

    return respond


def events_run(base: Path, events: list[TranscriptEvent], name: str = "events") -> Path:
    """A one-question, one-condition run whose transcript is exactly `events`, written through the store."""
    cond = Condition(slug="only", pipeline="generalist")
    scenario = Scenario(name=name, pipeline="generalist", model={"backend": "scripted"})
    q = GRID_QUESTIONS[0]
    plan = Plan(scenario=scenario, conditions=[cond], questions=[q], repeats=1, shard_size=4)
    runner = Runner.create(plan, run_dir=base / name)
    store = Store(runner.storage_url, runner.run_dir)
    result = QuestionResult(condition=cond.slug, dataset=q.dataset, qid=q.qid, answer=("A",), gold=q.gold,
                            correct=True, events=events)
    assert store.claim((cond.slug, q.dataset, q.qid, 0), "test")
    store.commit(result, q, "test")
    store.close()
    (runner.run_dir / "status.json").write_text(json.dumps({"state": "complete", "remaining": 0}))
    return runner.run_dir
