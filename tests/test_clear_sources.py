"""CLEAR's offline web is a source of its own: never the local corpus, no document in both, and the
packaged quickstart web (low- and medium-tier pages, some wrong) takes CLEAR's guard and audit
through their branches on the built-in sample questions, with a scripted backbone over real BM25."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.types import Question
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.sources.datasets import load_dataset
from medpanel.experiments.run.store.transcript_log import documents
from medpanel.retrieval.corpus import ingest
from medpanel.retrieval.home import corpora_root
from medpanel.retrieval.quickstart import QUICKSTART_WEB_WRONG, packaged_file
from medpanel.retrieval.search import SnapshotSearch, check_separate

from .conftest import write
from .test_clear import Script, call_steps, decision, judgement, run_clear, verdict


def _corpus(tmp_path: Path, name: str, docs: list[dict[str, Any]]) -> str:
    ingest([write(tmp_path / f"{name}.jsonl", "\n".join(json.dumps(d) for d in docs) + "\n")], name, progress=False)
    return name


LOCAL = [{"id": "p1", "title": "ECG in chest pain", "content": "A 12-lead ECG comes first in acute chest pain."}]
WEB = [{"id": "w1", "title": "Chest pain page", "url": "https://clinic.example.org/chest", "content": "ECG first."}]


def _run(tmp_path: Path, settings: str, pipeline: str = "clear", variants: str = "[clear-default]") -> Path:
    from medpanel.experiments.run.execution.runner import Runner
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import load_scenario

    f = write(tmp_path / "s.yaml", f"name: x\npipeline: {pipeline}\nvariants: {variants}\nsettings: {settings}\n"
                                   "dataset: {source: sample, limit: 1}\nmodel: {backend: scripted}\n")
    runner = Runner.create(make_plan(load_scenario(f), base_dir=tmp_path), run_dir=tmp_path / "run")
    runner.run(install_signals=False)
    return tmp_path / "run"


# -- one index cannot be both ---------------------------------------------------------------------


def test_the_same_corpus_named_as_local_and_web_is_refused_at_plan_time(tmp_path: Path) -> None:
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import load_scenario

    f = write(tmp_path / "s.yaml", "name: x\npipeline: clear\nsettings: {corpus: med, dynamic_corpus: med}\n"
                                   "model: {backend: scripted}\n")
    with pytest.raises(UserError, match="dynamic_corpus is the local corpus 'med'"):
        make_plan(load_scenario(f), base_dir=tmp_path)


def test_one_index_under_a_name_and_a_path_is_refused(tmp_path: Path) -> None:
    _corpus(tmp_path, "both", LOCAL + WEB)
    with pytest.raises(UserError, match=r"settings.dynamic_corpus: the offline web .* is the local corpus") as err:
        _run(tmp_path, f"{{corpus: both, dynamic_corpus: '{corpora_root() / 'both'}'}}")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("shared, what", [
    ({"id": "p1", "title": "copy", "url": "https://x.example.org/a", "content": "other text"}, "id"),
    ({"id": "w9", "title": "copy", "url": "https://clinic.example.org/chest", "content": "other text"}, "URL"),
    ({"id": "w9", "title": "copy", "url": "https://y.example.org/b", "content": LOCAL[0]["content"]}, "text"),
])
def test_a_web_that_shares_a_document_with_the_local_corpus_is_refused(tmp_path: Path, shared: dict[str, Any],
                                                                        what: str) -> None:
    local = [*LOCAL, {"id": "p2", "title": "t", "url": "https://clinic.example.org/chest", "content": "x"}] \
        if what == "URL" else LOCAL
    _corpus(tmp_path, "loc", local)
    _corpus(tmp_path, "web", [*WEB, shared] if what != "URL" else [shared])
    with pytest.raises(UserError, match=f"share 1 document\\(s\\) by {what}"):
        _run(tmp_path, "{corpus: loc, dynamic_corpus: web}")


def test_a_local_corpus_other_than_quickstart_needs_its_web_named(tmp_path: Path) -> None:
    _corpus(tmp_path, "loc", LOCAL)
    with pytest.raises(UserError, match=r"settings\.dynamic_corpus: the offline web needs a corpus of its own"):
        _run(tmp_path, "{corpus: loc}")


def test_direct_only_needs_no_web(tmp_path: Path) -> None:
    _corpus(tmp_path, "loc", LOCAL)
    # no local or web pathway: nothing to refuse, and the run answers without searching anything
    run = _run(tmp_path, "{corpus: loc}", variants="[direct]")
    with sqlite3.connect(run / "study.db") as conn:
        rows = conn.execute("select condition, error from mp_results").fetchall()
    assert rows and all(r == ("direct", None) for r in rows), rows
    docs = [json.loads(raw) for raw in documents(run)]
    assert len(docs) == len(rows)  # one transcript per row: the checks below cannot pass on none
    for doc in docs:
        searches = [e for e in doc["events"] if e.get("role") == "retrieval"]
        assert searches == [] and any(e["kind"] == "call" for e in doc["events"]), doc["events"]


def test_the_panels_clear_channel_refuses_one_index_as_both(tmp_path: Path) -> None:
    _corpus(tmp_path, "both", LOCAL + WEB)
    with pytest.raises(UserError, match=r"settings\.web_corpus: the offline web 'both' is the local corpus"):
        _run(tmp_path, "{corpus: both, web_corpus: both, rounds: 1, turns_per_round: 2}", pipeline="panel",
             variants="[c1r0k1-clear]")


def test_snapshot_search_needs_its_own_web_corpus(tmp_path: Path) -> None:
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import load_scenario

    f = write(tmp_path / "s.yaml", "name: x\npipeline: generalist\nvariants: [upfront]\n"
                                   "settings: {source: snapshot, corpus: medcorpus}\nmodel: {backend: scripted}\n")
    with pytest.raises(UserError, match=r"set settings\.web_corpus"):
        make_plan(load_scenario(f), base_dir=tmp_path)


# -- the packaged quickstart web ------------------------------------------------------------------


def test_quickstart_web_is_disjoint_from_the_quickstart_corpus_and_only_low_or_medium() -> None:
    check_separate("quickstart", "quickstart-web", field="settings.dynamic_corpus")  # no exception
    pages = [json.loads(line) for line in packaged_file("quickstart-web").read_text().splitlines()]
    from medpanel.retrieval.quality import assess_quality

    tiers = {p["id"]: assess_quality(p["url"], p["title"], p["content"]) for p in pages}
    assert set(tiers.values()) == {"low", "medium"}
    assert QUICKSTART_WEB_WRONG <= set(tiers)
    assert {tiers[i] for i in QUICKSTART_WEB_WRONG} == {"low", "medium"}  # wrong pages in both tiers
    assert all(".example." in p["url"] for p in pages)  # reserved domains: no real site is misquoted


def test_quickstart_web_covers_every_sample_question_with_medium_pages() -> None:
    web = SnapshotSearch("quickstart-web")
    for q in load_dataset("sample", None, None, None, 42):
        hits = web.search(" ".join([q.text, *q.options.values()])[:400], 8)
        assert sum(h.quality == "medium" for h in hits) >= 2, q.qid
        assert all(h.quality in ("low", "medium") and h.source == "web" for h in hits)


def _sample(qid: str) -> Question:
    return next(q for q in load_dataset("sample", None, None, None, 42) if q.qid == qid)


def test_the_guard_is_reached_on_the_fixture_and_rejects_without_a_high_source() -> None:
    q = _sample("s02")  # inferior STEMI; gold C
    s = Script(p="C", lc="C", d="A", verify=verdict("accept_dynamic", "A"))
    result = run_clear(q, s)  # the real quickstart corpus and quickstart web, table tiers
    assert result.summary["guard"] == "rejected_no_high" and result.answer == ("C",)
    assert result.summary["route"] == "keep_local" and result.summary["n_high"] == 0
    assert "followup_query" not in call_steps(result)
    dyn = decision(result).data["bundle"]["dynamic"]
    assert dyn and all(".example." in d["url"] for d in dyn)
    local = decision(result).data["bundle"]["local"]
    assert local and all(d["url"] is None and d["doc_id"].startswith("qs-") for d in local)


def test_the_guard_follows_up_on_the_fixture_when_the_labeller_finds_a_high_source() -> None:
    q = _sample("s02")
    labels = Script(p="C", lc="C", d="A", verify=verdict("accept_dynamic", "A"),
                    query={"query": "inferior ST elevation culprit artery right coronary left anterior descending"},
                    judge=judgement(default_not_better_supported=False),
                    extra={"assess_quality": _labels_first_high, "assess_followup_quality": _labels_first_high})
    result = run_clear(q, labels, settings={"llm_quality": True})
    guard = decision(result).data["guard"]
    assert guard["n_high"] >= 1 and guard["outcome"] == "rejected_conditions"
    assert guard["failed"] == ["default_not_better_supported"] and result.answer == ("C",)
    assert call_steps(result)[-3:] == ["followup_query", "assess_followup_quality", "followup_judge"]


def _labels_first_high(request: Any = None) -> dict[str, str]:
    fields = list(request.model.model_fields) if request is not None else []
    return {f: ("high" if i == 0 else "medium") for i, f in enumerate(fields)}


def test_the_audit_is_reached_on_the_fixture_and_its_medium_pages_meet_the_threshold() -> None:
    q = _sample("s02")
    s = Script(p="C", lc="C", d="B", verify=verdict("consensus", "C"),
               query={"query": "inferior STEMI culprit right coronary artery circumflex"},
               judge=judgement(exact_option_support=False))
    result = run_clear(q, s)
    audit = decision(result).data["audit"]
    assert audit["followup"]["n_medium"] >= 2 and audit["followup"]["n_high"] == 0
    assert audit["outcome"] == "kept_not_supported" and result.answer == ("C",)  # judged, consensus kept
    reopened = run_clear(q, Script(p="C", lc="C", d="B", verify=verdict("consensus", "C"),
                                   query={"query": "inferior STEMI culprit right coronary artery circumflex"}))
    assert reopened.summary["audit"] == "reopened" and reopened.answer == ("B",)


def test_the_clear_quickstart_scenario_uses_two_packaged_sources(tmp_path: Path) -> None:
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import load_scenario

    scenarios = Path(__file__).resolve().parents[1] / "scenarios"
    sc = load_scenario(scenarios / "clear_quickstart.yaml")
    plan = make_plan(sc, base_dir=scenarios)
    assert sc.settings["corpus"] == "quickstart" and sc.settings["dynamic_corpus"] == "quickstart-web"
    assert len(plan.questions) == 12 and "clear-default" in [c.slug for c in plan.conditions]
