"""MedRBench's outcome evaluator, re-implemented: one grader call per case judges the response
correct or wrong against the case's reference answer.

The benchmark's evaluator (`src/Evaluation/metrics/outcome_accuracy_eval.py`, CC BY-SA) asks an
LLM whether the predicted diagnosis matches the reference (aliases and synonyms count; extra
complications do not make it wrong) and, for a treatment plan, whether it matches the reference or
is supported as appropriate by additional information. The prompts here say the same rules in our
own words (the licence's share-alike would otherwise reach them).

The benchmark's treatment judge reads three web-search results (Bing) found with keywords it first
writes from the case. This judge does the same with the run's web-search backend when that is a
live one (`settings.dynamic_source`: tavily, or a `module:Class` web source that reads no local
corpus, built as CLEAR's online pathway builds its own): one grader call writes the query from the
case alone (summary, published analysis, reference plan; never the response or the condition),
the backend returns three results, and the judge reads them. With no live backend (the offline web
`snapshot`, the default) it reads the case summary and the published treatment-planning analysis
instead; the grade records which (`support`), and Table 3's note says so for the run.

A case scores 1 (correct) or 0; a stage's score is the percentage correct, and the overall score
pools the cases of both stages (`methods/clear/table3.py`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from pydantic import BaseModel, Field

from medpanel.agents.freetext.medrbench import PUBLISHED_ANALYSIS as PUBLISHED_ANALYSIS  # re-exported: its home before
from medpanel.agents.freetext.medrbench import MedRCase
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.client import QuestionSession
from medpanel.agents.prompting import Prompts
from medpanel.agents.types import TranscriptEvent
from medpanel.methods.clear.roles.grader import data_block
from medpanel.retrieval.evidence import Evidence
from medpanel.retrieval.sources import source_class

PROMPTS = Prompts(__name__)

WEB_RESULTS = 3
"""Search results the treatment judge reads (the benchmark's `return_num=3`)."""
RESULT_CHARS = 1500
"""Characters of each result's text shown to the judge."""
FALLBACK_SOURCE = "the case and the published treatment-planning analysis"


class WebSearch(Protocol):
    def search(self, query: str, k: int) -> list[Evidence]: ...


class OutcomeJudgement(BaseModel):
    correct: bool = Field(description="true if the predicted answer is correct.")
    explanation: str = Field(default="", description="One sentence.")


class SearchQuery(BaseModel):
    query: str = Field(min_length=1, description="The web search keywords.")


def live_web(kind: str) -> str | None:
    """`kind` when it is a live web search (a web source reading no local corpus), else None:
    the offline web (`snapshot`) is a corpus of the run's own, not a search engine."""
    cls = source_class(kind)
    return kind if cls.web and not cls.needs_corpus else None


def case_context(case: MedRCase) -> str:
    """What the keyword writer reads: the case as the benchmark's evaluator gives it (no response)."""
    return (f"Case summary:\n{case.summary.strip()}\n\nTreatment planning analysis:\n{case.analysis.strip()}"
            f"\n\nTreatment plan results:\n{case.reference.strip()}")


def web_support(results: list[Evidence]) -> str:
    if not results:
        return "(the search found nothing)"
    return "\n\n".join(f"[{i}] {e.title or e.url or e.doc_id}{f' ({e.url})' if e.url else ''}\n"
                        f"{e.text.strip()[:RESULT_CHARS]}" for i, e in enumerate(results, 1))


def judge_request(case: MedRCase, response: str, results: list[Evidence] | None = None) -> str:
    """The grader's request: the prediction, the reference and (treatment) the supporting information:
    the web results when the judge searched, else the case summary and its published analysis."""
    if results is None:
        support = f"Case summary:\n{case.summary.strip()}\n\nTreatment planning analysis:\n{case.analysis.strip()}"
        source = FALLBACK_SOURCE
    else:
        support, source = data_block("search_results", web_support(results)), "web search results found from the case"
    return PROMPTS.render(case.stage, prediction=data_block("prediction", response), reference=case.reference.strip(),
                          support=support, support_source=source)


async def _search(session: QuestionSession, grader: RoleAgent, case: MedRCase, web: WebSearch,
                  kind: str) -> tuple[str, list[Evidence]] | None:
    """The benchmark's two steps: keywords written from the case, then the search."""
    asked = await grader.speak(PROMPTS.render("keywords", case=data_block("case", case_context(case))), SearchQuery,
                               step="medrbench_keywords")
    if asked is None:
        return None
    query = asked.query.strip()[:400]
    results = list(await asyncio.to_thread(web.search, query, WEB_RESULTS))[:WEB_RESULTS]
    session.record(TranscriptEvent(
        kind="note", role="grader", agent="grader_search", step="medrbench_search",
        content=f"query: {query}" + ("" if results else " (nothing found)"),
        data={"kind": kind, "query": query, "k": WEB_RESULTS, "retrieved": [e.doc_id for e in results],
              "evidence": [e.model_dump(mode="json") for e in results]}))
    return query, results


async def grade_case(session: QuestionSession, case: MedRCase, response: str, *, web: WebSearch | None = None,
                     web_kind: str | None = None) -> dict[str, Any]:
    """One case judged correct or wrong. `web` (a live search, named `web_kind`) serves the treatment
    judge's supporting information; without it the judge reads the case's published analysis."""
    grader = RoleAgent(session, name="grader", role="grader", system_message=PROMPTS.render("system"))
    invalid = {"valid": False, "score": None, "kind": "medrbench", "model": session.spec.model_name}
    searched: dict[str, Any] = {}
    results: list[Evidence] | None = None
    if case.stage == "treatment":
        searched = {"support": PUBLISHED_ANALYSIS, "web_source": None}
        if web is not None and web_kind is not None:
            found = await _search(session, grader, case, web, web_kind)
            if found is None:
                return {**invalid, "support": "web", "web_source": web_kind}
            query, results = found
            searched = {"support": "web", "web_source": web_kind, "query": query,
                        "results": [{"title": e.title, "url": e.url} for e in results]}
    parsed = await grader.speak(judge_request(case, response, results), OutcomeJudgement,
                                step=f"medrbench_{case.stage}")
    if parsed is None:
        return {**invalid, **searched}
    return {"valid": True, "kind": "medrbench", "stage": case.stage, "correct": parsed.correct,
            "score": 1.0 if parsed.correct else 0.0, "explanation": parsed.explanation,
            "model": session.spec.model_name, **searched}
