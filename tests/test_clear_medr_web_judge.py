"""MedRBench's treatment judge with the run's web-search backend, as the benchmark's protocol has it
(keywords written from the case, three results, then the judgement), and the published-analysis
fallback when no live backend is set, said in the grade and in Table 3. The grader stays blind to
the condition: no condition name reaches any of its requests, nor the search query."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from medpanel.agents.freetext.files import read_all
from medpanel.agents.freetext.medrbench import MedRCase
from medpanel.agents.model.scripted import ScriptedRequest
from medpanel.agents.types import QuestionResult
from medpanel.methods.clear.table3 import table3
from medpanel.retrieval.evidence import Evidence
from medpanel.retrieval.sources import Source

from .test_clear import Env, Script, docs, installer, run_clear, verdict

DATA = Path(__file__).parent / "fixtures" / "freetext"
MEDR = {t.qid: t for t in read_all(DATA) if isinstance(t, MedRCase)}
TREAT = MEDR["PMC90000101"]
SLUGS = ("direct", "rag-bm25", "online", "clear-default", "clear-qpis")
QUERY = "solitary bone plasmacytoma treatment radiotherapy dose"
RESULTS = [Evidence(text=f"Guideline {i}: radiotherapy 40-50 Gy is the standard for solitary plasmacytoma.",
                    title=f"Guideline {i}", doc_id=f"g{i}", source="web", url=f"https://www.nih.gov/guide/{i}",
                    score=1.0, retriever="tavily", rank=i) for i in range(1, 5)]


@pytest.fixture()
def env(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Env]:
    return installer(monkeypatch)


def judge(correct: bool = True) -> Callable[[ScriptedRequest], Any]:
    def reply(r: ScriptedRequest) -> dict[str, Any]:
        return {"correct": correct, "explanation": "judged"}
    return reply


def script() -> Script:
    return Script(p="Radiotherapy.", lc="Radiotherapy.", d="Radiotherapy.",
                  verify=verdict("consensus", "Radiotherapy to the lesion."),
                  extra={"respond": {"response": "Radiotherapy to the T9 lesion."},
                         "medrbench_keywords": {"query": QUERY},
                         "medrbench_treatment": judge(), "medrbench_diagnosis": judge(False),
                         "plan": {"sub_queries": ["plasmacytoma"]}, "sufficiency": {"sufficient": True}})


def run(case: MedRCase, s: Script, variant: str, source: str | None) -> QuestionResult:
    settings: dict[str, Any] = {"rubric_file": str(DATA)}
    if source:
        settings["dynamic_source"] = source
    return run_clear(case.question(), s, variant=variant, settings=settings)


def test_no_live_backend_reads_the_published_analysis_and_says_so(env: Callable[..., Env]) -> None:
    e = env([docs(high=1)])
    s = script()
    row = run(TREAT, s, "direct", None)  # the default web is the offline snapshot: no live search
    assert not e.dynamic.queries and not s.requests("medrbench_keywords")
    (request,) = s.requests("medrbench_treatment")
    # the request as it always was: the case summary and its analysis, under the same heading
    assert ("Supporting information (the case and the published treatment-planning analysis):\nCase summary:\n"
            f"{TREAT.summary.strip()}\n\nTreatment planning analysis:\n{TREAT.analysis.strip()}") in request.last
    grade = row.events[-1].data["grade"]
    assert (grade["support"], grade["web_source"], grade["correct"]) == ("published_analysis", None, True)
    assert row.summary["judge_support"] == "published_analysis"
    rows: list[Any] = [row]
    t = table3(rows, ["direct"])
    assert t is not None and "No live web search backend is set" in (t.note or "")
    assert "published treatment-planning analysis (1 grades)" in (t.note or "")


def test_a_live_backend_gives_the_judge_three_results_found_from_the_case(env: Callable[..., Env]) -> None:
    e = env([RESULTS])
    s = script()
    row = run(TREAT, s, "direct", "tavily")  # direct never searches: every query is the judge's
    (keywords,) = s.requests("medrbench_keywords")
    for text in (TREAT.summary.strip(), TREAT.analysis.strip(), TREAT.reference.strip()):
        assert text in keywords.last  # the case as the benchmark's keyword step reads it
    assert "Radiotherapy to the T9 lesion." not in keywords.last  # never the response
    assert e.dynamic.queries == [QUERY]
    (request,) = s.requests("medrbench_treatment")
    assert "Supporting information (web search results found from the case):" in request.last
    assert all(r.text in request.last for r in RESULTS[:3]) and RESULTS[3].text not in request.last
    assert TREAT.analysis.strip() not in request.last  # the search results replace the analysis
    grade = row.events[-1].data["grade"]
    assert (grade["support"], grade["web_source"], grade["query"]) == ("web", "tavily", QUERY)
    assert [x["url"] for x in grade["results"]] == [r.url for r in RESULTS[:3]]
    (note,) = [ev for ev in row.events if ev.step == "medrbench_search"]
    assert note.role == "grader" and note.data["retrieved"] == ["g1", "g2", "g3"]
    assert row.events[-1].data["adapter_searches"] == 0  # the judge's search is not the condition's
    assert row.summary["judge_support"] == "web:tavily" and row.summary["rubric_score"] == 1.0
    rows: list[Any] = [row]
    t = table3(rows, ["direct"])
    assert t is not None and "three web search results per case from tavily (1 grades)" in (t.note or "")
    assert "No live web" not in (t.note or "")


def test_diagnosis_never_searches(env: Callable[..., Env]) -> None:
    e = env([RESULTS])
    s = script()
    row = run(MEDR["PMC90000001"], s, "direct", "tavily")
    assert not e.dynamic.queries and not s.requests("medrbench_keywords")
    assert "support" not in row.events[-1].data["grade"] and row.summary.get("judge_support") is None


def test_the_grader_and_its_search_never_see_the_condition(env: Callable[..., Env]) -> None:
    for slug in SLUGS:
        e = env([RESULTS])
        s = script()
        row = run(TREAT, s, slug, "tavily")
        assert row.events[-1].data["grade"]["support"] == "web", (slug, row.error)
        graded = [r for r in s.seen if r.tag.role == "grader"]
        assert [r.tag.step for r in graded] == ["medrbench_keywords", "medrbench_treatment"]
        for text in [json.dumps(r.messages) for r in graded] + [e.dynamic.queries[-1]]:
            for name in (*SLUGS, "clear", "rag", "pipeline", "qpis", "online"):
                assert not re.search(rf"\b{re.escape(name)}\b", text, re.IGNORECASE), (slug, name)
        assert e.dynamic.queries[-1] == QUERY


class FakeWeb(Source):
    """A live web backend of one's own (`dynamic_source: module:Class`): no corpus, every query kept."""

    kind = "fake-web"
    web = True
    queries: ClassVar[list[str]] = []

    def search(self, query: str, k: int) -> list[Evidence]:
        FakeWeb.queries.append(query)
        return RESULTS[:k]


def test_a_module_class_backend_is_built_as_the_online_pathway_builds_its_own() -> None:
    FakeWeb.queries.clear()
    s = script()
    row = run(TREAT, s, "direct", f"{__name__}:FakeWeb")  # the real pipeline, no injected factory
    assert FakeWeb.queries == [QUERY]
    grade = row.events[-1].data["grade"]
    assert (grade["support"], grade["web_source"]) == ("web", f"{__name__}:FakeWeb")
    assert row.summary["judge_support"] == f"web:{__name__}:FakeWeb"
