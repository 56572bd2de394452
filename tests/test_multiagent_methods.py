"""The published multi-agent methods (medagents, mdagents, kamac) together: their settings, the
`multiagent` pipeline's variants, and the shipped scenario run to a report. Each method's own
behaviour (stage order, calls per stage, who saw what) is in `test_<method>_method.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from medpanel.experiments.analysis.report import build_tables
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.rundir import load_record
from medpanel.experiments.run.store.store import Store

from .conftest import write
from .multiagent_helpers import reply, steps
from .scripted_helpers import Q4, run

REPO = Path(__file__).resolve().parents[1]


# -- settings, the variants, the scenario, a scripted run ------------------------------------------


@pytest.mark.parametrize("pipeline,settings,field", [
    ("medagents", "{max_attempts: 0}", "max_attempts"),
    ("mdagents", "{rounds: 0}", "rounds"),
    ("mdagents", "{exemplar_file: nope.jsonl}", "exemplar_file"),
    ("kamac", "{initial_agents: 3, max_agents: 2}", "max_agents"),
    ("kamac", "{turn: 3}", "turn"),
    ("kamac", "{max_new_per_turn: 2}", "max_new_per_turn"),
    ("kamac", "{turns: 5, max_turns: 4}", "max_turns"),
])
def test_bad_settings_are_one_line_exit_2(tmp_path: Path, pipeline: str, settings: str, field: str) -> None:
    from .test_bad_inputs import invoke

    path = write(tmp_path / "s.yaml", f"name: x\npipeline: {pipeline}\nsettings: {settings}\n"
                                      "dataset: {source: sample, limit: 1}\nmodel: {backend: scripted}\n")
    res = invoke(["validate", str(path)])
    assert res.rc == 2 and not res.tb
    assert field in res.err and len(res.err.strip().splitlines()) == 1


def test_the_scenario_runs_the_three_methods_on_the_sample_set_to_a_report(tmp_path: Path) -> None:
    text = (REPO / "scenarios/multiagent_methods.yaml").read_text()
    text = text.replace("model: {backend: local, max_tokens: 1024}", "model: {backend: scripted}")
    text = text.replace("run: {workers: 4, max_errors: 10}", "run: {workers: 2, max_errors: 0}")
    text = text.replace("dataset: {source: sample}", "dataset: {source: sample, limit: 3}")
    path = write(tmp_path / "m.yaml", text)
    runner = Runner.create(make_plan(load_scenario(path), base_dir=tmp_path), run_dir=tmp_path / "run")
    assert runner.run(install_signals=False)["state"] == "complete"
    store = Store(f"sqlite:///{tmp_path / 'run' / 'study.db'}", tmp_path / "run")
    try:
        rows = store.rows()
    finally:
        store.close()
    assert sorted({r.condition for r in rows}) == ["kamac", "mdagents", "medagents"]
    assert len(rows) == 3 * 6  # the limit is per subset: 2 subsets x 3 questions
    assert all(r.error is None for r in rows)
    tables = build_tables(rows, load_record(tmp_path / "run"), n_boot=200)
    accuracy = tables[0]
    assert {"medagents", "mdagents", "kamac"} <= {str(cell) for row in accuracy.rows for cell in row}


# The three on the embedded model: tests/test_benchmark_methods.py::test_every_table7_method_runs_on_the_embedded_model


def test_the_multiagent_pipeline_names_each_original_as_a_variant() -> None:
    """`multiagent` variants `medagents-original` / `mdagents-original` run the method's `original`
    variant: gersteinlab/MedAgents' per-stage reply caps, mitmedialab/MDAgents' answers per round."""
    from medpanel.agents.types import Condition

    def cond(variant: str, **settings: object) -> Condition:
        return Condition(slug=variant, pipeline="multiagent", flags={"variant": variant}, settings=settings)

    rules = {"vote.expert": {"agree": True}}
    _, bench = run(cond("medagents"), Q4, reply(rules))
    _, orig = run(cond("medagents-original"), Q4, reply(rules))
    assert all("max_tokens" not in r.extra for r in bench.requests)
    assert {r.extra.get("max_tokens") for r in orig.requests if r.tag.step == "vote.expert"} == {30}
    talk = {"triage.complexity": {"reasoning": "r", "complexity": "moderate"}, "debate.talk": {"talk": True},
            "debate.choose": {"experts": [1]}, "debate.message": {"message": "m"}}
    md = {"mdagents": {"rounds": 2, "turns": 1}}
    b, _ = run(cond("mdagents", **md), Q4, reply(talk))
    o, _ = run(cond("mdagents-original", **md), Q4, reply(talk))
    assert steps(b).count("mdt.final") == 5 and steps(o).count("mdt.final") == 10
    assert o.summary["variant"] == "original" and b.summary["variant"] == "benchmark"


def test_the_protocol_line_declares_how_each_method_in_the_run_differs_from_its_code() -> None:
    from medpanel.experiments.analysis.protocol import protocol_line
    from medpanel.experiments.run.scenario.scenario import load_scenario
    from medpanel.methods.kamac.report import DIFFERENCES as KAMAC
    from medpanel.methods.mdagents.report import DIFFERENCES as MDAGENTS
    from medpanel.methods.medagents.report import DIFFERENCES as MEDAGENTS

    line = protocol_line(load_scenario(REPO / "scenarios/multiagent_methods.yaml").model_dump())
    for m, differences in {"medagents": MEDAGENTS, "mdagents": MDAGENTS, "kamac": KAMAC}.items():
        assert f"{m} differs from its code in: " in line and f"docs/methods/{m}.md" in line
        assert all(d in line for d in differences)
        assert (REPO / "docs" / "methods" / f"{m}.md").is_file()
    only = protocol_line({"name": "x", "pipeline": "multiagent", "variants": ["mdagents-original"]})
    assert "mdagents differs" in only and "kamac differs" not in only and "medagents differs" not in only
    assert "differs from its code" not in protocol_line({"name": "y", "pipeline": "baseline", "variants": ["cot"]})


@pytest.mark.parametrize("variant", ["medagents", "medagents-original", "mdagents", "mdagents-original", "kamac"])
def test_no_request_depends_on_the_gold_answer(variant: str) -> None:
    """The same question with its gold letter moved: every request body is byte-identical (the
    scripted model's replies are drawn from the request, so the whole discussion is replayed)."""
    import json

    from medpanel.agents.model.scripted import synthesize
    from medpanel.agents.types import Condition

    cond = Condition(slug=variant, pipeline="multiagent", flags={"variant": variant})

    def respond(r: object) -> object:
        return synthesize(r.model, json.dumps(r.messages)) if r.model else "ok"  # type: ignore[attr-defined]

    bodies = []
    for gold in ("A", "C"):
        _, client = run(cond, Q4.model_copy(update={"gold": (gold,)}), respond)
        bodies.append([json.dumps(r.messages, sort_keys=True) for r in client.requests])
    assert bodies[0] and bodies[0] == bodies[1]
