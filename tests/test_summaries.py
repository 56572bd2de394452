"""The summary models are typed both ways: a pipeline cannot store a fact its model does not
declare (a typo is an error, not a new column), and a reader views a stored row through its model,
keeping only the facts that model declares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from medpanel.agents.pipelines.registry import built_in, get_pipeline
from medpanel.agents.summary import Fact, Summary
from medpanel.methods.baselines.pipeline import BaselineSummary
from medpanel.methods.benchmark.flows import BenchmarkSummary
from medpanel.methods.clear.summary import ClearSummary
from medpanel.methods.kamac.pipeline import KamacSummary
from medpanel.methods.mdagents.pipeline import MDAgentsSummary
from medpanel.methods.medagents.pipeline import MedAgentsSummary
from medpanel.methods.panel.calibrated import CalibratedSummary, merge_channel_facts
from medpanel.methods.panel.channels.knowledge import KnowledgeFacts
from medpanel.methods.panel.generalist import GeneralistSummary
from medpanel.methods.panel.summary import PanelSummary

MODELS = [Summary, KnowledgeFacts, GeneralistSummary, PanelSummary, CalibratedSummary, ClearSummary,
          BaselineSummary, BenchmarkSummary, MedAgentsSummary, MDAgentsSummary, KamacSummary]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_an_undeclared_fact_is_refused_given_or_assigned(model: type[Summary]) -> None:
    with pytest.raises(ValidationError, match="recruted"):
        model.model_validate({"recruted": 3})
    summary = model()
    with pytest.raises(ValidationError, match="recruted"):
        summary.recruted = 3  # type: ignore[attr-defined]  # the point: mypy and pydantic both refuse it
    assert summary.data() == {}


def test_every_built_in_pipeline_stores_a_model_that_refuses_extras() -> None:
    for name in built_in():
        model = get_pipeline(name).summary_model
        with pytest.raises(ValidationError):
            model.model_validate({"no_such_fact": 1})


def test_an_assigned_fact_is_checked_against_its_type() -> None:
    summary = PanelSummary(recruited=1)
    with pytest.raises(ValidationError, match="recruited"):
        summary.recruited = "many"  # type: ignore[assignment]
    assert summary.recruited == 1


def test_the_facts_keep_the_order_the_pipeline_set_them_in() -> None:
    summary = GeneralistSummary(challenged=True, timing="between_gap", material_weakness=None)
    summary.gap_type = "evidence"
    summary.changed = False
    summary.add(KnowledgeFacts(gate_fired=True, queries_written=1, queries=["q"]))
    summary.material_weakness = True  # set again: it keeps its place
    assert list(summary.data()) == ["challenged", "timing", "material_weakness", "gap_type", "changed",
                                    "gate_fired", "queries_written", "queries"]
    assert summary.data()["material_weakness"] is True
    assert summary.record() == {"format_version": Summary.FORMAT_VERSION, **summary.data()}


def test_add_leaves_out_what_it_is_told_to() -> None:
    inner = BaselineSummary(method="sc", n_samples=5)
    outer = BenchmarkSummary(method="cot-sc").add(inner, without={"method"})
    assert outer.data() == {"method": "cot-sc", "n_samples": 5}


def test_a_view_reads_the_facts_its_model_declares() -> None:
    # A calibrated row carries the generalist's facts too; the panel's tables read it as a PanelSummary.
    row = CalibratedSummary(challenged=True, recruited=0, level="advanced", final_panel_size=4).record()
    view = PanelSummary.view(row)
    assert view.data() == {"recruited": 0, "final_panel_size": 4}
    assert view.format_version == Summary.FORMAT_VERSION
    with pytest.raises(ValidationError):  # a declared fact of the wrong type is still an error
        PanelSummary.view({"recruited": "three"})


def test_channel_facts_of_several_groups_add_up() -> None:
    merged = merge_channel_facts([
        KnowledgeFacts(gate_fired=False, queries_written=0, queries=[], searches=0, retrievals=0,
                       passages_retrieved=0, briefs_written=0, briefs_delivered=0, brief_received_by=[]),
        KnowledgeFacts(gate_fired=True, queries_written=2, queries=["a", "b"], searches=2, retrievals=1,
                       passages_retrieved=16, briefs_written=1, briefs_delivered=1, brief_received_by=["s2", "s1"]),
        KnowledgeFacts(gate_fired=True, queries_written=1, queries=["c"], searches=1, retrievals=1,
                       passages_retrieved=8, briefs_written=1, briefs_delivered=0, brief_received_by=["s1"]),
    ])
    assert merged.data() == {"gate_fired": True, "queries_written": 3, "searches": 3, "retrievals": 2,
                             "passages_retrieved": 24, "briefs_written": 2, "briefs_delivered": 1,
                             "queries": ["a", "b", "c"], "brief_received_by": ["s1", "s2"]}


NESTED = Path(__file__).parent / "fixtures" / "summaries_nested.jsonl"
"""Summaries with nested facts as the pipelines stored them while those facts were dicts (one row
of each: sc with a budget, the benchmark's flows, KAMAC, MDAgents, MedAgents)."""
NESTED_MODELS: dict[str, type[Summary]] = {"baseline": BaselineSummary, "benchmark": BenchmarkSummary,
                                           "kamac": KamacSummary, "mdagents": MDAgentsSummary,
                                           "medagents": MedAgentsSummary}
NESTED_FIELDS = ("budget", "samples", "vote", "iterations", "members", "generations", "choices", "recruited",
                 "teams", "votes")


@pytest.mark.parametrize("row", [json.loads(line) for line in NESTED.read_text(encoding="utf-8").splitlines()],
                         ids=lambda r: f"{r['pipeline']}-{r['variant']}")
def test_nested_facts_stored_as_dicts_read_back_typed_and_store_the_same_json(row: dict[str, Any]) -> None:
    summary = NESTED_MODELS[row["pipeline"]].view(row["summary"])
    nested = [name for name in NESTED_FIELDS if name in row["summary"]]
    assert nested  # every row has some
    for name in nested:
        value = getattr(summary, name)
        for item in value if isinstance(value, list) else [value]:
            assert isinstance(item, Fact), (name, item)
    # the same facts, in the same order, nested keys included: a run written before reads and re-stores as it was
    assert json.dumps(summary.data()) == json.dumps(row["summary"])


def test_a_nested_fact_refuses_a_key_it_does_not_declare() -> None:
    with pytest.raises(ValidationError, match="colour"):
        MDAgentsSummary.model_validate({"teams": [{"team": "a", "members": ["x"], "colour": "red"}]})
    with pytest.raises(ValidationError, match="spent_calls"):
        BaselineSummary.model_validate({"budget": {"by": "calls", "target": 3, "reference": {}, "spent_tokens": 1,
                                                   "capped": False}})
