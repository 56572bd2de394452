"""The benchmark context (single-model rows): zero-shot, few-shot and the named variants (`spp`,
`medprompt-shuffle`) on scripted models, the exemplar sources, the shared cache, and the Table 7-shaped
report counted by hand. The methods traced against the benchmark's code are in test_benchmark_flows.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.model.cache import ResponseCache
from medpanel.agents.model.scripted import ScriptedRequest, synthesize
from medpanel.agents.types import Condition, Question
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.transcript_log import documents
from medpanel.methods.benchmark.pipeline import permutation
from medpanel.methods.benchmark.tables import benchmark_tables, context_table, write_pareto
from tests.run_records import run_record

from .conftest import write
from .scripted_helpers import Q4, run


def method(name: str, **settings: Any) -> Condition:
    return Condition(slug=name, pipeline="benchmark", flags={"variant": name}, settings=settings)


def steps(result: Any) -> list[str]:
    return [e.step for e in result.events if e.kind == "call"]


def options_block(r: ScriptedRequest) -> dict[str, str]:
    """Letter -> option text as the request's newest message shows them."""
    out = {}
    for line in r.last.split("Options:")[-1].splitlines():
        if line.startswith("(") and ")" in line:
            out[line[1:line.index(")")]] = line[line.index(")") + 2:]
    return out


# -- zero-shot, cot and the shared cache -----------------------------------------------------------


def test_zero_shot_is_directs_request_and_shares_its_cache(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    direct, c1 = run(Condition(slug="direct", pipeline="direct"), Q4, lambda r: {"answer": "A"}, cache=cache)
    zero, c2 = run(method("zero-shot"), Q4, lambda r: {"answer": "B"}, cache=cache)
    assert len(c1.requests) == 1 and len(c2.requests) == 0  # the same request: answered from the cache
    assert zero.answer == direct.answer == ("A",)
    # Served from the cache, the request still counts in what zero-shot costs alone.
    assert zero.summary["requested_calls"] == 1 and zero.summary["requested_tokens"] == direct.tokens > 0
    cot, c3 = run(method("cot"), Q4, lambda r: {"reasoning": "r", "answer": "C"}, cache=cache)
    assert len(c3.requests) == 1 and cot.answer == ("C",)  # cot is another request


# -- few-shot -----------------------------------------------------------------------------------------


def test_few_shot_is_one_call_with_the_first_k_builtin_exemplars() -> None:
    result, client = run(method("few-shot", k_shots=2), Q4, lambda r: {"answer": "A"})
    assert steps(result) == ["answer"] and len(client.requests) == 1
    sent = client.requests[0].last
    assert "ST elevation in leads II, III and aVF" in sent and "diffuse non-tender goitre" in sent
    assert "periorbital oedema" not in sent  # the third exemplar: k = 2
    # zero-shot's reply, exemplars added
    assert set(client.requests[0].model.model_json_schema()["properties"]) == {"answer"}
    assert result.summary["exemplar_source"] == "builtin"
    assert result.summary["exemplars"] == ["mp-ex-1", "mp-ex-2"] and result.summary["excluded_exemplars"] == []


def test_an_exemplar_equal_to_the_asked_question_is_excluded(tmp_path: Path) -> None:
    pool = tmp_path / "train.jsonl"
    rows = [{"realidx": "same", "question": "  a 30-year-old has CHEST pain.  Best next step?", "options": Q4.options,
             "answer_idx": "A"},
            {"realidx": "other", "question": "Which vitamin is low in pernicious anaemia?",
             "options": {"A": "B12", "B": "C"}, "answer_idx": "A"}]
    pool.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    result, client = run(method("few-shot", exemplars=str(pool), k_shots=5), Q4, lambda r: {"answer": "A"})
    assert result.summary["exemplars"] == ["other"] and result.summary["excluded_exemplars"] == ["same"]
    assert client.requests[0].last.count("chest pain") + client.requests[0].last.count("CHEST pain") == 1


def plan_of(tmp_path: Path, variant: str, settings: str) -> Any:
    path = write(tmp_path / "s.yaml", f"name: s\npipeline: benchmark\nvariants: [{variant}]\nsettings: {settings}\n"
                                      "dataset: {source: sample, limit: 1}\nmodel: {backend: scripted}\n")
    return make_plan(load_scenario(path), base_dir=tmp_path, file=str(path))


@pytest.mark.parametrize("variant", ["few-shot", "medprompt"])
def test_an_exemplar_pool_named_as_a_test_split_is_refused(tmp_path: Path, variant: str) -> None:
    pool = write(tmp_path / "test_hard.jsonl", json.dumps({"question": "q", "options": {"A": "x"}, "answer_idx": "A"}))
    with pytest.raises(UserError) as exc:
        plan_of(tmp_path, variant, f"{{exemplars: '{pool}'}}")
    assert exc.value.field == "settings.exemplars" and "test split" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_cot_sc_at_temperature_zero_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError) as exc:
        plan_of(tmp_path, "cot-sc", "{temperature: 0, n_samples: 5}")
    assert "temperature" in str(exc.value) and "\n" not in str(exc.value)
    plan = plan_of(tmp_path, "cot-sc", "{temperature: 0.7}")
    assert [c.slug for c in plan.conditions] == ["cot-sc"]


def test_cot_sc_samples_at_distinct_seeds_and_temperature() -> None:
    answers = iter(["B", "A", "A", "B", "C"])
    result, client = run(method("cot-sc", n_samples=5, temperature=0.7), Q4,
                         lambda r: {"reasoning": "r", "answer": next(answers) if r.tag.step != "aggregate" else "A"})
    samples = client.requests[:5]
    assert [r.tag.step for r in samples] == [f"sample_{i}" for i in range(5)]
    assert len({r.extra["seed"] for r in samples}) == 5
    assert {r.extra["temperature"] for r in samples} == {0.7}
    assert "temperature" not in client.requests[5].extra  # the aggregation call keeps the model's own
    assert result.summary["vote"]["rule"] == "tie_first_to_reach_count" and result.summary["method"] == "cot-sc"


# -- spp (MultiPersona as Solo Performance Prompting) --------------------------------------------------------


def persona_responder(final: str) -> Any:
    def respond(r: ScriptedRequest) -> Any:
        step = r.tag.step
        if step == "personas":
            return {"personas": ["zqcardiologist", "zqpharmacist"]}
        if step == "brainstorm":
            return {"notes": "zqnote-brainstorm"}
        if step == "collaborate":
            return {"draft": f"zqdraft-{r.tag.round}", "critique": "c"}
        return {"reasoning": "r", "answer": final}
    return respond


def test_spp_stages_in_order_and_each_sees_the_last() -> None:
    result, client = run(method("spp", persona_rounds=2), Q4, persona_responder("A"))
    assert steps(result) == ["personas", "brainstorm", "collaborate", "collaborate", "final_answer"]
    brainstorm, collab1, collab2, final = client.requests[1:]
    assert "zqcardiologist" in brainstorm.last and "zqpharmacist" in brainstorm.last
    assert any("zqnote-brainstorm" in str(m["content"]) for m in collab1.messages)
    assert any("zqdraft-1" in str(m["content"]) for m in collab2.messages)
    assert any("zqdraft-2" in str(m["content"]) for m in final.messages)
    assert set(final.model.model_fields) == {"reasoning", "answer"}
    assert {e.role for e in result.events if e.kind == "call"} == {"multipersona"}
    assert result.answer == ("A",) and result.summary["personas"] == ["zqcardiologist", "zqpharmacist"]


def test_spp_invalid_final_answer_is_counted_invalid() -> None:
    result, _ = run(method("spp"), Q4, persona_responder("Z"))
    assert result.invalid and result.answer == () and steps(result)[-2:] == ["final_answer", "final_answer:reask"]


# -- medprompt-shuffle (Nori et al.'s choice-shuffle ensemble) -----------------------------------------------


def test_medprompt_shuffle_unshuffles_each_member_before_the_vote() -> None:
    def by_text(r: ScriptedRequest) -> Any:  # always the option whose text is "ECG", wherever it was shuffled
        shown = options_block(r)
        return {"reasoning": "r", "answer": next(k for k, v in shown.items() if v == "ECG")}

    result, client = run(method("medprompt-shuffle", shuffles=3), Q4, by_text)
    assert steps(result) == ["shuffle_0", "shuffle_1", "shuffle_2"]
    orders = [options_block(r) for r in client.requests]
    assert len({tuple(o.values()) for o in orders}) > 1  # the members saw different option orders
    assert [m["answer"] for m in result.summary["members"]] == [["A"]] * 3
    assert result.answer == ("A",) and result.summary["vote"]["rule"] == "majority"


def test_medprompt_shuffle_votes_on_original_letters_not_shown_ones() -> None:
    result, _ = run(method("medprompt-shuffle", shuffles=3), Q4, lambda r: {"reasoning": "r", "answer": "A"})
    members = result.summary["members"]
    originals = [m["order"][0] for m in members]  # shown A is the option first in each member's order
    assert [m["answer"] for m in members] == [[o] for o in originals]
    counts: dict[str, int] = {}
    for o in originals:
        counts[o] = counts.get(o, 0) + 1
    assert result.summary["vote"]["counts"] == counts


def test_medprompt_shuffles_are_seeded_and_knn_picks_the_closest_exemplar() -> None:
    # Both MedPrompts rank the pool alike: `medprompt` by `knn_k`, `medprompt-shuffle` by `shuffle_knn_k`.
    q = Question(dataset="unit", qid="mi", text="ECG shows ST elevation in leads II, III and aVF. Which artery?",
                 options={"A": "LAD", "B": "RCA", "C": "LCx", "D": "Left main"}, gold=("B",))
    assert permutation(q, 42, 0) == permutation(q, 42, 0) and permutation(q, 42, 0) != permutation(q, 43, 0)
    result, client = run(method("medprompt-shuffle", shuffle_knn_k=2, shuffles=1), q,
                         lambda r: {"reasoning": "r", "answer": "B"})
    assert result.summary["exemplars"][0] == "mp-ex-1"
    assert "Reasoning: ST elevation in II, III and aVF" in client.requests[0].last  # CoT exemplars
    assert len(client.requests) == 1
    knn, client = run(method("medprompt", knn_k=1, medprompt_generations=1, medprompt_choices=1), q,
                      lambda r: {"reasoning": "r", "answer": "B"} if r.tag.step.startswith("generate") else
                      {"choice": "0"})
    assert knn.summary["exemplars"] == ["mp-ex-1"] and "A: Right coronary artery" in client.requests[0].last


# -- the seed's conditions run through their own pipelines ----------------------------------------------


def test_seed_condition_variant_plans_and_runs_through_its_own_pipeline(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "generalist-between-gap", "{generalist: {corpus: quickstart}}")
    stored = plan.resolved.plans["generalist-between-gap"]
    assert stored.method == "generalist-between-gap"
    assert stored.inner["challenger"] is True and stored.inner["timing"] == "between_gap"
    result, _ = run(method("panel-c1r1"), Q4, lambda r: synthesize(r.model, r.last) if r.model else "ok")
    assert "select_specialists" in steps(result) and "critique" in steps(result)  # the panel's own stages
    assert {e.role for e in result.events if e.kind == "call"} >= {"challenger"}


# -- the Table 7 report, counted by hand -------------------------------------------------------------


def row(cond: str, ds: str, qid: str, correct: bool, *, invalid: bool = False, error: str | None = None,
        tokens: int = 100, cost: float = 0.001) -> Row:
    return Row(condition=cond, dataset=ds, qid=qid, repeat=0, answer="", gold="A", correct=correct, invalid=invalid,
               error=error, error_kind=None, calls=1, logical_calls=1, tokens=tokens, latency_s=0.0, summary={},
               transcript="", cost_usd=cost)


ROWS = [
    # zero-shot: medqa 1 of 3 (one invalid), pubmedqa 1 of 1 -> mean (33.3 + 100) / 2 = 66.7, pooled 2 / 4 = 50.0
    row("zero-shot", "medqa", "1", True, tokens=300), row("zero-shot", "medqa", "2", False, invalid=True, tokens=100),
    row("zero-shot", "medqa", "3", False, tokens=200), row("zero-shot", "pubmedqa", "9", True, tokens=400),
    # panel-c1r1: medqa 3 of 3, pubmedqa 0 of 1 (an error) -> mean (100 + 0) / 2 = 50.0, pooled 3 / 4 = 75.0
    row("panel-c1r1", "medqa", "1", True, cost=0.01), row("panel-c1r1", "medqa", "2", True, cost=0.01),
    row("panel-c1r1", "medqa", "3", True, cost=0.01),
    row("panel-c1r1", "pubmedqa", "9", False, error="boom", cost=0.01),
]


def test_table7_counts_mean_pooled_invalid_errors_and_cost() -> None:
    table = context_table(ROWS, ["zero-shot", "panel-c1r1"])
    cols = table.columns
    assert cols[:3] == ["method", "medqa", "pubmedqa"]  # MedAgentsBench's column order
    z, p = (dict(zip(cols, r, strict=True)) for r in table.rows)
    assert (z["medqa"], z["pubmedqa"], z["mean_%"], z["pooled_%"], z["n"]) == (33.3, 100.0, 66.7, 50.0, 4)
    assert (z["invalid"], z["errors"], z["tokens/q"], z["sent_tokens/q"], z["sent_usd/q"]) == (1, 0, 250.0, 250.0,
                                                                                          "0.00100")
    assert (z["gpt-4o_tokens/q"], z["gpt-4o_usd/q"]) == (284, "0.00073")
    few_table = context_table([row("few-shot", "medqa", "1", True)], ["few-shot"])
    few = dict(zip(few_table.columns, few_table.rows[0], strict=True))
    # reference_results.csv, gpt-4o few_shot: (1,361,087 prompt + 26,192 completion) tokens / 862 = 1,609;
    # USD at $2.5 / $10 per M tokens: (1,361,087 x 2.5 + 26,192 x 10) / 1e6 / 862 = 0.00425
    assert (few["gpt-4o_tokens/q"], few["gpt-4o_usd/q"]) == (1609, "0.00425")
    assert (p["medqa"], p["pubmedqa"], p["mean_%"], p["pooled_%"]) == (100.0, 0.0, 50.0, 75.0)
    assert (p["invalid"], p["errors"], p["sent_usd/q"], p["gpt-4o_tokens/q"]) == (0, 1, "0.01000", "-")


def test_table7_tokens_are_requested_tokens_when_the_summary_has_them() -> None:
    rows = [row("cot", "medqa", "1", True, tokens=0), row("cot", "medqa", "2", True, tokens=40)]
    rows[0].summary["requested_tokens"] = 300  # a cache hit: nothing sent, 300 requested
    rows[1].summary["requested_tokens"] = 40
    r = dict(zip(context_table(rows, ["cot"]).columns, context_table(rows, ["cot"]).rows[0], strict=True))
    assert (r["tokens/q"], r["sent_tokens/q"]) == (170.0, 20.0)


def test_table7_pairs_each_method_with_the_seeds_best_condition() -> None:
    meta = {"scenario": {"pipeline": "benchmark"}}
    tables = benchmark_tables(ROWS, ["zero-shot", "panel-c1r1"], run_record(meta), n_boot=200)
    paired = dict(zip(tables[1].columns, tables[1].rows[0], strict=True))
    # questions: medqa 1 both right, 2 and 3 only the panel, pubmedqa 9 only zero-shot
    assert (paired["method"], paired["reference"], paired["n"]) == ("zero-shot", "panel-c1r1", 4)
    assert (paired["acc_ref_%"], paired["acc_method_%"], paired["diff_pts"]) == (75.0, 50.0, -25.0)
    assert (paired["method_only"], paired["ref_only"]) == (1, 2)
    assert benchmark_tables(ROWS, ["zero-shot"], run_record({"scenario": {"pipeline": "baseline"}})) == []


def test_pareto_figure_is_written(tmp_path: Path) -> None:
    files = write_pareto(ROWS, ["zero-shot", "panel-c1r1"], tmp_path, n_boot=100)
    assert sorted(f.name for f in files) == ["accuracy_vs_cost.png", "accuracy_vs_cost.svg"]
    assert all(f.stat().st_size > 0 for f in files)


# -- end to end on the embedded model ---------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.timeout(1500)
def test_every_table7_method_runs_on_the_embedded_model(tmp_path: Path) -> None:
    """All ten methods of the benchmark context on two sample questions through the embedded model,
    in one run, with the smallest stages that keep each method's structure (one exemplar, two
    samples, generations and choices, one refinement, one persona round, MedAgents 1 + 1 domains and one vote,
    MDAgents 1 x 1, KAMAC one turn) and short replies, so it stays within minutes on 2 cores. The
    defaults are pinned on the scripted model above."""
    import sqlite3
    import subprocess
    import sys

    from .conftest import ROOT

    run_dir = tmp_path / "run"
    methods = ["zero-shot", "few-shot", "cot", "cot-sc", "multipersona", "self-refine", "medprompt",
               "medagents", "mdagents", "kamac"]
    proc = subprocess.run(
        [sys.executable, "-m", "medpanel", "run", str(ROOT / "scenarios" / "benchmark_context.yaml"),
         "--run-dir", str(run_dir), "--quiet", "--set", f"variants=[{', '.join(methods)}]",
         "--set", "compare=[]", "--set", "dataset={source: sample, subsets: [medqa-style], limit: 2}",
         "--set", "settings.n_samples=2", "--set", "settings.medprompt_generations=2",
         "--set", "settings.medprompt_choices=2", "--set", "settings.refine_iterations=1",
         "--set", "settings.persona_rounds=1", "--set", "settings.k_shots=1", "--set", "settings.knn_k=1",
         "--set", "settings.reply_caps=model",
         "--set", "settings.medagents={question_domains: 1, option_domains: 1, max_attempts: 1}",
         "--set", "settings.mdagents={rounds: 1, turns: 1, mdt_experts: 2, ict_groups: 2, ict_members: 2}",
         "--set", "settings.kamac={turns: 1, max_turns: 1, max_agents: 2}",
         "--set", "model.max_tokens=96", "--set", "run.workers=4"],
        capture_output=True, text=True, timeout=1400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with sqlite3.connect(run_dir / "study.db") as conn:
        rows = conn.execute("select condition, answer, invalid, error, logical_calls from mp_results").fetchall()
    assert sorted({r[0] for r in rows}) == sorted(methods) and len(rows) == 20
    assert all(r[3] is None for r in rows), rows
    assert all((r[1] == "") == bool(r[2]) for r in rows)  # invalid is counted, never an empty "answer"
    first = {"medagents": "domains.question", "mdagents": "triage.complexity", "kamac": "recruit.initial",
             "multipersona": "debate", "medprompt": "generate_0"}
    for name, step in first.items():
        doc = next(d for d in map(json.loads, documents(run_dir)) if d["condition"] == name)
        calls = [e for e in doc["events"] if e["kind"] == "call"]
        assert calls[0]["step"] == step and calls[0]["model"] == "SmolLM2-135M-Instruct", calls[0]
    report = subprocess.run([sys.executable, "-m", "medpanel", "report", str(run_dir), "--html"],
                            capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr
    assert "Table 7 shape" in report.stdout and "Paired against the seed" in report.stdout
    assert (run_dir / "report" / "plots" / "accuracy_vs_cost.png").is_file()


@pytest.mark.parametrize(("variant", "first", "last"), [("medagents", "domains.question", "decision.answer"),
                                                        ("kamac", "recruit.initial", "decision.moderator"),
                                                        ("mdagents", "triage.complexity", None)])
def test_a_multi_agent_row_runs_through_its_own_pipeline_in_the_benchmark_run(
        variant: str, first: str, last: str | None) -> None:
    # Table 7's multi-agent rows share the benchmark run (one cache, paired statistics) but keep
    # their own method: the stages are those of the method's own pipeline, in its order.
    result, _ = run(method(variant), Q4, lambda r: synthesize(r.model, r.last) if r.model else "ok")
    calls = [e.step for e in result.events if e.kind == "call"]
    assert calls[0] == first, calls[:3]
    if last is not None:
        assert calls[-1] == last, calls[-3:]
    assert result.error is None and not result.invalid and result.answer
    assert result.summary["requested_calls"] == len(calls)
