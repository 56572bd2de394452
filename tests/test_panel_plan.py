"""The panel's plan: every condition decoded once, as docs/methods/panel.md's table says, and a run
that does what the plan says (not what the settings would say if read again)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.model.client import QuestionSession
from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines.base import Outcome
from medpanel.agents.types import Condition, TranscriptEvent
from medpanel.experiments.run.scenario.plan import ResolvedRun, resolve_run
from medpanel.experiments.run.scenario.scenario import slug_for
from medpanel.experiments.run.store.records import PlanRecord
from medpanel.methods.panel.pipeline import PanelPipeline, PanelPlan
from medpanel.methods.panel.settings import PanelSettings
from medpanel.retrieval.corpus import ingest

from .conftest import write
from .scripted_helpers import Q4

DOC = Path(__file__).resolve().parent.parent / "docs" / "methods" / "panel.md"
FIELDS = ("challenger", "recruit", "knowledge", "coordination", "evidence", "timing", "blind")
CRIT = "CRIT-5d1e-TOKEN"


def table_rows() -> list[dict[str, str]]:
    """The rows of the docs' table of plans."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## The plan of a condition", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")), strict=True)) for ln in lines[2:]]


def flags_of(slug: str) -> dict[str, int | str]:
    base, _, variant = slug.partition("-")
    flags: dict[str, int | str] = {k: int(v) for k, v in re.findall(r"([crk])(\d)", base)}
    if variant:
        flags["variant"] = variant
    assert slug_for(flags) == slug  # the slug the scenario would give these flags
    return flags


def settings_of(cell: str) -> dict[str, str]:
    return dict(part.split(": ", 1) for part in cell.strip("`").split(", ")) if cell else {}


def cell(value: object) -> str:
    return ("yes" if value else "no") if isinstance(value, bool) else str(value)


ROWS = table_rows()


def test_the_table_covers_every_condition_of_the_grid_and_each_timing() -> None:
    plain = {r["condition"].strip("`") for r in ROWS if not r["settings"]}
    assert {f"c{c}r{r}k{k}" for c in (0, 1) for r in (0, 1) for k in (0, 1)} <= plain
    assert {"c1r1k1-ind", "c1-routed", "c1r0k1-clear"} <= plain
    timings = {settings_of(r["settings"]).get("timing") for r in ROWS}
    assert {"between_blind", "upfront", "none"} <= timings


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['condition'].strip('`')} {r['settings']}" for r in ROWS])
def test_plan_fields_are_what_the_docs_say(row: dict[str, str]) -> None:
    slug = row["condition"].strip("`")
    condition = Condition(slug=slug, pipeline="panel", flags=flags_of(slug))
    plan = resolve_run("panel", settings_of(row["settings"]), [condition]).plans[slug]
    assert isinstance(plan, PanelPlan)
    assert {f: cell(getattr(plan, f)) for f in FIELDS} == {f: row[f] for f in FIELDS}
    # run.json keeps the plan; a resume reads back exactly this plan
    assert PanelPlan.model_validate(json.loads(json.dumps(plan.model_dump(mode="json")))) == plan


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['condition'].strip('`')} {r['settings']}" for r in ROWS])
def test_a_plan_stored_before_k_was_decoded_at_plan_time_reads_back_decoded(row: dict[str, str]) -> None:
    # run.json of a run started before `evidence`, `timing` and `blind` were plan fields: the resume
    # decodes them from the stored flags and settings, instead of refusing the run.
    slug = row["condition"].strip("`")
    condition = Condition(slug=slug, pipeline="panel", flags=flags_of(slug))
    resolved = resolve_run("panel", settings_of(row["settings"]), [condition])
    record = json.loads(resolved.record().model_dump_json())
    for name in ("evidence", "timing", "blind"):
        del record["conditions"][slug][name]
    again = ResolvedRun.from_record(PlanRecord.model_validate(record), file="run.json")
    assert again.plans[slug] == resolved.plans[slug]


@pytest.fixture()
def corpus(tmp_path: Path) -> str:
    """A local corpus and an offline web of its own (CLEAR's two retrieval pathways)."""
    docs = [{"id": "d1", "title": "ECG first", "content": "In acute chest pain an ECG is the first test."},
            {"id": "d2", "title": "Chest pain", "content": "Chest pain evaluation starts with an ECG."}]
    pages = [{"id": "w1", "title": "A page", "content": "Chest pain: an ECG first, says this page.",
              "url": "https://health.example.com/chest-pain"}]
    ingest([write(tmp_path / "c.jsonl", "\n".join(json.dumps(d) for d in docs) + "\n")], "plancorpus",
           progress=False)
    ingest([write(tmp_path / "w.jsonl", "\n".join(json.dumps(d) for d in pages) + "\n")], "planweb",
           progress=False)
    return "plancorpus"


def respond(r: ScriptedRequest) -> Any:
    step = r.tag.step.split(":")[0]
    if step == "select_specialists":
        return {"specialists": [{"role": "Cardiologist", "expertise": "heart"},
                                {"role": "Internist", "expertise": "all"}]}
    if r.tag.role == "challenger":
        return {"material_weakness": True, "gap_type": "insufficient_evidence", "challenge": f"{CRIT}: why?"}
    if r.tag.role == "knowledge_gate":
        return {"retrieve": True, "knowledge_gap": "first test", "query": "chest pain ECG"}
    if r.tag.role == "curator":
        return {"points": [{"point": f"fact {i}", "sources": [1]} for i in range(5)]}
    if r.tag.role == "candidate":
        return {"reasoning": "view", "answer": "A"}
    if r.tag.role == "verifier":
        return {"answer": "A", "rationale": "agree", "route": "consensus", "confidence": "high"}
    return {"reasoning": f"{r.tag.agent} reasons", "answer": "A"}


def run_plan(plan: PanelPlan, settings: PanelSettings) -> tuple[Outcome, list[ScriptedRequest], list[TranscriptEvent]]:
    client = ScriptedChatCompletionClient(respond)
    session = QuestionSession(spec=ModelSpec(backend="scripted", cache="off"), inner=client)
    outcome = asyncio.run(PanelPipeline().discuss(Q4, plan, session, settings))
    return outcome, client.requests, session.events


def planned(slug: str, corpus: str, **settings: Any) -> tuple[PanelPlan, PanelSettings]:
    s = PanelSettings(rounds=1, turns_per_round=2, corpus=corpus, k=2, web_corpus="planweb", **settings)
    plan = PanelPipeline().plan(Condition(slug=slug, pipeline="panel", flags=flags_of(slug)), s)
    return plan, s


def test_the_run_opens_the_evidence_channel_the_plan_chose(corpus: str) -> None:
    plan, settings = planned("c1r0k1", corpus)  # decoded: the curator's channel over the corpus
    _, _, events = run_plan(plan, settings)
    assert "source" not in next(e for e in events if e.step == "brief").data
    # the same settings, a plan that chose CLEAR: CLEAR's channel is the one called
    _, requests, events = run_plan(plan.model_copy(update={"evidence": "clear"}), settings)
    assert next(e for e in events if e.step == "brief").data["source"] == "clear"
    assert any(r.tag.role == "verifier" for r in requests)
    # and the other way round: settings that say CLEAR, a plan that chose the corpus
    plan, settings = planned("c1r0k1", corpus, k_source="clear")
    assert plan.evidence == "clear"
    _, requests, events = run_plan(plan.model_copy(update={"evidence": "corpus"}), settings)
    assert "source" not in next(e for e in events if e.step == "brief").data
    assert not any(r.tag.role == "verifier" for r in requests)
    # a plan without a channel opens none, whatever the `k` flag says
    _, requests, _ = run_plan(plan.model_copy(update={"evidence": "none", "timing": "none"}), settings)
    assert not any(r.tag.role in ("knowledge_gate", "curator", "verifier") for r in requests)


def test_the_run_retrieves_at_the_plans_timing(corpus: str) -> None:
    plan, settings = planned("c1r0k1", corpus)  # settings.timing: between_gap
    _, requests, _ = run_plan(plan.model_copy(update={"timing": "upfront"}), settings)
    roles = [r.tag.role for r in requests]
    assert roles.index("curator") < roles.index("specialist") and "knowledge_gate" not in roles
    plan, settings = planned("c1r0k1", corpus, timing="upfront")
    _, requests, _ = run_plan(plan.model_copy(update={"timing": "between_gap"}), settings)
    roles = [r.tag.role for r in requests]
    assert roles.index("knowledge_gate") > roles.index("challenger")


def test_the_gate_sees_the_critique_as_the_plans_blindness_says(corpus: str) -> None:
    plan, settings = planned("c1r0k1", corpus)
    assert not plan.blind
    for blind in (False, True):
        _, requests, events = run_plan(plan.model_copy(update={"blind": blind}), settings)
        gate = next(r for r in requests if r.tag.role == "knowledge_gate")
        assert (CRIT in gate.last) is not blind
        assert next(e for e in events if e.step == "gate_decision").data["blind"] is blind
