"""Baselines (direct, cot, self-consistency) and call-matched budgets, on scripted models."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from medpanel.agents.model.cache import ResponseCache, cache_key
from medpanel.agents.model.client import QuestionSession, RecordingClient
from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines.run import run_question
from medpanel.agents.pipelines.tally import vote
from medpanel.agents.types import Condition
from medpanel.experiments.analysis.report import accuracy_compute_table, build_tables
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.store import Row, Store
from medpanel.methods.baselines.pipeline import SEED_STRIDE
from tests.run_records import run_record

from .conftest import write
from .fake_openai import FakeOpenAI, completion
from .scripted_helpers import Q4, QMULTI, run


def baseline(kind: str, **settings: Any) -> Condition:
    return Condition(slug=kind, pipeline=kind, settings=settings)


def calls(result: Any) -> list[Any]:
    return [e for e in result.events if e.kind == "call"]


# -- direct and chain of thought ------------------------------------------------------------------


def test_direct_is_one_answer_only_call() -> None:
    result, client = run(baseline("direct"), Q4, lambda r: {"answer": "A"})
    assert len(client.requests) == 1
    req = client.requests[0]
    assert set(req.model.model_json_schema()["properties"]) == {"answer"}  # no reasoning field: zero-shot
    assert "do not explain" in req.system
    assert [e.step for e in calls(result)] == ["answer"]
    assert result.answer == ("A",) and result.correct and not result.invalid
    assert result.summary == {"method": "direct"}


def test_cot_reasons_before_answering() -> None:
    result, client = run(baseline("cot"), Q4, lambda r: {"reasoning": "ECG first.", "answer": "B"})
    assert len(client.requests) == 1
    assert list(client.requests[0].model.model_fields) == ["reasoning", "answer"]
    assert "step by step" in client.requests[0].system
    assert result.answer == ("B",) and not result.correct and not result.invalid


@pytest.mark.parametrize("kind", ["direct", "cot"])
def test_invalid_reply_is_reasked_once_then_invalid(kind: str) -> None:
    result, client = run(baseline(kind), Q4, lambda r: {"answer": "Z"})  # not an option
    assert [e.step for e in calls(result)] == ["answer", "answer:reask"]
    assert len(client.requests) == 2
    assert result.invalid and result.answer == () and not result.correct
    assert calls(result)[-1].invalid


def test_reask_can_rescue_the_answer() -> None:
    replies = iter(["no json here", json.dumps({"answer": "A"})])
    result, _ = run(baseline("direct"), Q4, lambda r: next(replies))
    assert result.answer == ("A",) and not result.invalid


# -- self-consistency -------------------------------------------------------------------------------


def by_seed(answers: dict[int, Any]) -> Any:
    """A responder whose reply depends only on the per-call seed, like a sampler (None: unusable text)."""

    def respond(r: ScriptedRequest) -> Any:
        a = answers[r.extra["seed"]]
        return "not json" if a is None else {"reasoning": "r", "answer": a}

    return respond


def seeds(n: int, base: int = 42) -> list[int]:
    return [base + i * SEED_STRIDE for i in range(n)]


def test_sc_samples_are_distinct_requests_the_cache_keeps_apart(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    s = seeds(4)
    result, client = run(baseline("sc", n_samples=4, temperature=0.9), Q4,
                         by_seed(dict(zip(s, ["A", "B", "A", "C"], strict=True))), cache=cache)
    # Four requests reached the model: identical messages, told apart only by seed.
    assert len(client.requests) == 4
    assert all(r.messages == client.requests[0].messages for r in client.requests)
    assert [r.extra["seed"] for r in client.requests] == s
    assert {r.extra["temperature"] for r in client.requests} == {0.9}
    assert not any(e.cache_hit for e in calls(result))
    assert [e.data["sampling"] for e in calls(result)] == [{"seed": x, "temperature": 0.9} for x in s]
    assert [x["seed"] for x in result.summary["samples"]] == s
    assert result.answer == ("A",) and result.summary["vote"]["rule"] == "majority"
    # The same run again is answered by the cache, sample by sample (same seed, same reply).
    again, client2 = run(baseline("sc", n_samples=4, temperature=0.9), Q4, lambda r: {"answer": "Z"}, cache=cache)
    assert len(client2.requests) == 0 and again.answer == ("A",)
    cache.close()


def test_sc_sends_each_samples_seed_and_temperature_over_http(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real OpenAI client path: per-call overrides reach the request body."""
    monkeypatch.setenv("MP_TEST_KEY", "sk-test")
    reply = json.dumps({"reasoning": "r", "answer": "A"})
    with FakeOpenAI(lambda body, n: (200, {}, completion(reply))) as srv:
        spec = ModelSpec(backend="openai", name="fake-model", base_url=srv.base_url, api_key_env="MP_TEST_KEY",
                         temperature=0.0, seed=42, cache="off")
        result = asyncio.run(run_question(baseline("sc", n_samples=3, temperature=0.6), Q4, spec))
    assert result.answer == ("A",)
    assert [(b["seed"], b["temperature"]) for b in srv.requests] == [(x, 0.6) for x in seeds(3)]


def test_sc_seeds_follow_the_repeat_seed() -> None:
    _, client = run(baseline("sc", n_samples=3), Q4, lambda r: {"reasoning": "r", "answer": "A"}, seed=7)
    assert [r.extra["seed"] for r in client.requests] == seeds(3, base=7)


def test_sampling_overrides_enter_the_cache_key_and_create_args() -> None:
    inner = ScriptedChatCompletionClient(lambda r: "x")
    session = QuestionSession(spec=ModelSpec(backend="scripted", temperature=0.0, seed=42), inner=inner)
    client = RecordingClient(session)
    msgs = [{"role": "user", "content": "hi"}]
    plain = client._request(msgs)
    client.overrides = {"seed": 1042, "temperature": 0.7}
    sampled = client._request(msgs)
    assert (plain["seed"], plain["temperature"]) == (42, 0.0)
    assert (sampled["seed"], sampled["temperature"]) == (1042, 0.7)
    assert cache_key(plain) != cache_key(sampled)
    client.overrides = {}
    assert cache_key(client._request(msgs)) == cache_key(plain)  # no overrides: keys are unchanged
    client.overrides = {"top_k": 3}
    with pytest.raises(ValueError, match="top_k"):
        client._request(msgs)


def test_sc_invalid_samples_are_recorded_and_do_not_vote() -> None:
    s = seeds(5)
    # Sample 1 fails twice (its re-ask carries the same seed), so it is invalid and does not vote.
    answers = dict(zip(s, ["B", None, "A", "A", "B"], strict=True))
    result, client = run(baseline("sc", n_samples=5), Q4, by_seed(answers))
    samples = result.summary["samples"]
    assert [x["valid"] for x in samples] == [True, False, True, True, True]
    assert samples[1]["calls"] == 2 and samples[1]["answer"] is None
    assert result.summary["invalid_samples"] == 1 and result.summary["valid_samples"] == 4
    assert result.summary["vote"]["counts"] == {"B": 2, "A": 2}
    # Tie at two each: A reached two first (sample 3), B only at sample 4, though B came first.
    assert result.summary["vote"]["rule"] == "tie_first_to_reach_count"
    assert result.answer == ("A",)
    assert [e.step for e in calls(result)] == ["sample_0", "sample_1", "sample_1:reask", "sample_2", "sample_3",
                                              "sample_4"]
    assert len(client.requests) == 6


def test_vote_tie_rule_is_by_sample_order_never_by_letter() -> None:
    assert vote([("B",), ("A",), ("A",), ("B",)])["answer"] == "A"  # A reaches 2 first
    assert vote([("A",), ("B",), ("B",), ("A",)])["answer"] == "B"  # B reaches 2 first, not the first letter
    assert vote([("D",), None, ("C",)])["answer"] == "D"  # 1-1 tie: first to reach one
    v = vote([("C",), ("B",), ("B",)])
    assert (v["answer"], v["rule"], v["tied"]) == ("B", "majority", [])
    assert vote([None, None]) == {"answer": None, "counts": {}, "rule": "no_valid_sample", "tied": []}
    assert vote([("A", "C"), ("A",), ("A", "C")])["answer"] == "A,C"  # multi-answer items vote with the set


def test_sc_all_invalid_is_invalid() -> None:
    result, _ = run(baseline("sc", n_samples=3), Q4, lambda r: "nothing usable")
    assert result.invalid and result.answer == () and not result.correct
    assert result.summary["vote"]["rule"] == "no_valid_sample" and result.summary["valid_samples"] == 0


def test_sc_multi_answer_item() -> None:
    s = seeds(3)
    result, _ = run(baseline("sc", n_samples=3), QMULTI,
                    by_seed({s[0]: ["C", "A"], s[1]: ["A"], s[2]: ["A", "C"]}))
    assert result.answer == ("A", "C") and result.correct


def test_fixed_call_baselines_refuse_a_budget() -> None:
    result, _ = run(baseline("cot", budget={"by": "calls", "target": 4}), Q4, lambda r: {"answer": "A"})
    assert result.error_kind == "internal" and "cannot spend a budget" in (result.error or "")


# -- budget matching --------------------------------------------------------------------------------

REFERENCE = """name: reference
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: sample, limit: 2{subsets}}}
model: {{backend: scripted}}
run: {{workers: 1}}
"""

MATCHED = """name: matched
pipeline: {pipeline}
settings: {{temperature: 0.8}}
{budget}
dataset: {{source: sample, limit: 2}}
model: {{backend: scripted}}
run: {{workers: 1}}
"""


def reference_run(tmp_path: Path, subsets: str = "") -> Path:
    path = write(tmp_path / "ref.yaml", REFERENCE.format(subsets=subsets))
    runner = Runner.create(make_plan(load_scenario(path), base_dir=tmp_path), run_dir=tmp_path / "ref")
    assert runner.run(install_signals=False)["state"] == "complete"
    return runner.run_dir


def matched_plan(tmp_path: Path, *, run_dir: Path | str, condition: str = "c1", by: str = "calls",
                 pipeline: str = "sc") -> Any:
    budget = f"budget_match: {{run: '{run_dir}', condition: {condition}, by: {by}}}"
    path = write(tmp_path / "m.yaml", MATCHED.format(pipeline=pipeline, budget=budget))
    return make_plan(load_scenario(path), base_dir=tmp_path, file=str(path))


def rows_of(run_dir: Path, condition: str) -> dict[tuple[str, str], Row]:
    store = Store(f"sqlite:///{run_dir / 'study.db'}", run_dir)
    try:
        return {r.key: r for r in store.rows() if r.condition == condition}
    finally:
        store.close()


def test_budget_matched_sc_spends_the_reference_calls_per_question(tmp_path: Path) -> None:
    ref_dir = reference_run(tmp_path)
    plan = matched_plan(tmp_path, run_dir=ref_dir)
    runner = Runner.create(plan, run_dir=tmp_path / "sc")
    assert runner.run(install_signals=False)["state"] == "complete"
    ref = rows_of(ref_dir, "c1")
    mine = rows_of(runner.run_dir, "sc")
    assert set(mine) == set(ref) and len(mine) == 4
    for key, row in mine.items():
        assert not row.error, row.error
        assert row.logical_calls == ref[key].logical_calls, key
        b = row.summary["budget"]
        assert b["by"] == "calls" and b["target"] == ref[key].logical_calls == b["spent_calls"]
        assert b["reference"]["condition"] == "c1" and b["reference"]["run"] == str(ref_dir.resolve())
        assert row.summary["n_samples"] == ref[key].logical_calls  # every sample valid: one call each
        assert not b["capped"]
    # The reference's requested calls, not the calls it sent: c1 shares its first call with c0
    # through the cache, and the matched baseline is charged for it as c1 would be alone.
    assert any(ref[k].calls < ref[k].logical_calls for k in ref)
    # The budgets are frozen in run.json: a resume uses exactly them, wherever the reference is.
    meta = json.loads((runner.run_dir / "run.json").read_text())
    assert meta["budget_reference"]["condition"] == "c1"
    reopened = Runner.open(runner.run_dir)
    assert reopened.plan.budget is not None and reopened.plan.budget.calls == plan.budget.calls
    # The report puts the reference's calls per question beside the matched baseline's.
    table = next(t for t in build_tables(list(mine.values()), run_record(meta), n_boot=50)
                 if t.title == "Accuracy and compute")
    line = dict(zip(table.columns, table.rows[0], strict=True))
    assert line["matched_to"] == "c1 by calls"
    assert line["requested_calls_per_q"] == line["ref_requested_calls_per_q"] == \
        round(sum(r.logical_calls for r in ref.values()) / 4, 2)


def test_budget_by_tokens_samples_until_the_reference_tokens(tmp_path: Path) -> None:
    ref_dir = reference_run(tmp_path)
    runner = Runner.create(matched_plan(tmp_path, run_dir=ref_dir, by="tokens"), run_dir=tmp_path / "sc")
    runner.run(install_signals=False)
    ref_store = Store(f"sqlite:///{ref_dir / 'study.db'}", ref_dir)
    ref_tokens = {}
    for doc in ref_store.iter_transcripts():
        if doc["condition"] == "c1":
            q = doc["question"]
            ref_tokens[(q["dataset"], q["qid"])] = sum(e["usage"]["prompt_tokens"] + e["usage"]["completion_tokens"]
                                                       for e in doc["events"] if e["kind"] == "call")
    ref_store.close()
    for key, row in rows_of(runner.run_dir, "sc").items():
        b = row.summary["budget"]
        assert b["by"] == "tokens" and b["target"] == ref_tokens[key] == b["reference"]["tokens"]
        last = row.summary["samples"][-1]["tokens"]
        # Reached the target with the last sample, not before it.
        assert b["spent_tokens"] >= b["target"] > b["spent_tokens"] - last
        assert row.summary["n_samples"] > 1


def test_a_question_the_reference_lacks_is_a_no_reference_error_row(tmp_path: Path) -> None:
    ref_dir = reference_run(tmp_path, subsets=", subsets: [medqa-style]")
    runner = Runner.create(matched_plan(tmp_path, run_dir=ref_dir), run_dir=tmp_path / "sc")
    assert runner.run(install_signals=False)["state"] == "complete"
    rows = rows_of(runner.run_dir, "sc")
    missing = {k for k, r in rows.items() if r.error_kind == "no_reference"}
    assert missing == {k for k in rows if k[0] == "pubmedqa-style"} and len(missing) == 2
    for k in missing:
        assert rows[k].calls == 0 and "c1" in (rows[k].error or "")
    assert all(not rows[k].error for k in rows if k not in missing)


def test_missing_reference_run_is_a_clear_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError) as exc:
        matched_plan(tmp_path, run_dir=tmp_path / "runs" / "nope")
    msg = str(exc.value)
    assert exc.value.field == "budget_match.run"
    assert "no run.json" in msg and "--set budget_match.run=" in msg and "ablation_2x2.yaml" in msg


def test_reference_condition_absent_is_a_clear_user_error(tmp_path: Path) -> None:
    ref_dir = reference_run(tmp_path)
    with pytest.raises(UserError) as exc:
        matched_plan(tmp_path, run_dir=ref_dir, condition="c1r1")
    assert exc.value.field == "budget_match.condition"
    assert "'c1r1'" in str(exc.value) and "c0, c1" in str(exc.value)


@pytest.mark.parametrize("pipeline", ["direct", "cot"])
def test_budget_match_on_a_fixed_call_baseline_is_refused(tmp_path: Path, pipeline: str) -> None:
    with pytest.raises(UserError) as exc:
        matched_plan(tmp_path, run_dir=tmp_path / "whatever", pipeline=pipeline)
    assert exc.value.field == "budget_match"
    assert "cannot be budget-matched" in str(exc.value) and f"'{pipeline}'" in str(exc.value)


def test_baseline_pipeline_needs_variants(tmp_path: Path) -> None:
    path = write(tmp_path / "b.yaml", "name: b\npipeline: baseline\ndataset: {source: sample}\n")
    with pytest.raises(UserError, match="needs variants"):
        make_plan(load_scenario(path), base_dir=tmp_path)
    path = write(tmp_path / "b2.yaml", "name: b\npipeline: baseline\nvariants: [direct, cot, sc]\n")
    assert [c.slug for c in make_plan(load_scenario(path), base_dir=tmp_path).conditions] == ["direct", "cot", "sc"]


# -- report -----------------------------------------------------------------------------------------


def _row(cond: str, qid: str, correct: bool, logical: int, tokens: int, summary: dict[str, Any] | None = None) -> Row:
    return Row(condition=cond, dataset="d", qid=qid, repeat=0, answer="A", gold="A", correct=correct, invalid=False,
               error=None, error_kind=None, calls=logical - 1, logical_calls=logical, tokens=tokens, latency_s=1.0,
               summary=summary or {}, transcript="t.json")


def test_accuracy_and_compute_table() -> None:
    rows = [_row("c1r1", "1", True, 10, 1000), _row("c1r1", "2", False, 20, 3000)]
    plain = accuracy_compute_table(rows, ["c1r1"])
    assert plain.columns == ["condition", "n", "accuracy_%", "requested_calls_per_q", "tokens_per_q"]
    assert plain.rows == [["c1r1", 2, 50.0, 15.0, 2000.0]]

    def budget(calls: int, tokens: int) -> dict[str, Any]:
        # as `sc` stores it: the target, where it came from, and what was spent of it
        return {"budget": {"by": "calls", "target": calls, "reference": {"condition": "c1r1", "calls": calls,
                                                                          "tokens": tokens},
                           "spent_calls": calls, "spent_tokens": tokens, "capped": False}}

    sc = [_row("sc", "1", True, 10, 800, budget(10, 1000)), _row("sc", "2", True, 21, 900, budget(20, 3000))]
    table = accuracy_compute_table(rows + sc, ["c1r1", "sc"])
    assert table.columns[-3:] == ["matched_to", "ref_requested_calls_per_q", "ref_tokens_per_q"]
    assert table.rows == [["c1r1", 2, 50.0, 15.0, 2000.0, "", "", ""],
                          ["sc", 2, 100.0, 15.5, 850.0, "c1r1 by calls", 15.0, 2000.0]]
    # Added after the cost table; the existing tables keep their place.
    titles = [t.title for t in build_tables(rows + sc, run_record({"conditions": [{"slug": "c1r1"}, {"slug": "sc"}]}),
                                            n_boot=50)]
    assert titles[:3] == ["Accuracy per condition x dataset", "Cost per question", "Accuracy and compute"]


def test_scripted_sc_default_replies_differ_by_seed() -> None:
    # Without a responder the scripted model's reply depends on the seed too, as a sampler's would.
    result, _ = run(baseline("sc", n_samples=6), Q4, None)  # type: ignore[arg-type]
    assert len({tuple(x["answer"]) for x in result.summary["samples"]}) > 1


def test_sc_under_a_hand_set_budget_respects_the_sample_cap() -> None:
    result, client = run(baseline("sc", max_samples=3, budget={"by": "calls", "target": 50}), Q4,
                         lambda r: {"reasoning": "r", "answer": "A"})
    assert len(client.requests) == 3 and result.summary["budget"]["capped"] is True


def test_a_reference_from_another_model_is_refused_unless_allowed(tmp_path: Path) -> None:
    ref_dir = reference_run(tmp_path)
    budget = f"budget_match: {{run: '{ref_dir}', condition: c1, by: calls}}"
    other = MATCHED.format(pipeline="sc", budget=budget).replace("{backend: scripted}",
                                                                 "{backend: scripted, name: bigger-model}")
    path = write(tmp_path / "other.yaml", other)
    with pytest.raises(UserError) as exc:
        make_plan(load_scenario(path), base_dir=tmp_path, file=str(path))
    assert exc.value.field == "budget_match.allow_other_model"
    assert "scripted/scripted" in str(exc.value) and "scripted/bigger-model" in str(exc.value)
    allowed = write(tmp_path / "allowed.yaml", other.replace("by: calls}", "by: calls, allow_other_model: true}"))
    plan = make_plan(load_scenario(allowed), base_dir=tmp_path, file=str(allowed))
    assert plan.budget is not None and plan.budget.calls
