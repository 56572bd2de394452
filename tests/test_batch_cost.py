"""`model.batch` in money and settings: batch calls priced at the batch price (half the listed one
unless the scenario says), the ledger's batch columns, the planner's estimate with and without
batching, and the block's bad values refused on one line naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

import medpanel
from medpanel.agents.types import TranscriptEvent, Usage
from medpanel.experiments.analysis.inference.ledger import condition_totals, ledger
from medpanel.experiments.analysis.inference.plan import CostProfile, batch_wall_time_s, cost_projection
from medpanel.experiments.analysis.run_summary import batch_line
from medpanel.experiments.analysis.study import ledger_table
from medpanel.experiments.run.tracking.budget import Price, batch_saving, event_cost

from .conftest import write
from .test_plan_cli import SCENARIO, invoke


def _call(pt: int, ct: int, *, batch: str | None = None, cached: int = 0, hit: bool = False) -> TranscriptEvent:
    e = TranscriptEvent(kind="call", role="specialist", agent="s", step="initial", model="m", cache_hit=hit,
                        usage=Usage(prompt_tokens=pt, completion_tokens=ct, cached_tokens=cached))
    if batch:
        e.data["batch"] = batch
    return e


def test_a_batch_call_costs_half_the_listed_price_unless_the_scenario_prices_it() -> None:
    listed = {"m": Price(input=2.0, output=8.0, cached_input=1.0)}
    direct, batched = _call(1_000_000, 1_000_000), _call(1_000_000, 1_000_000, batch="batch_1")
    assert event_cost(direct, listed) == pytest.approx(10.0)
    assert event_cost(batched, listed) == pytest.approx(5.0)
    assert batch_saving(batched, listed) == pytest.approx(5.0) and batch_saving(direct, listed) == 0.0
    # Cached prompt tokens in a batch: the cached rate at the batch's discount on input.
    assert event_cost(_call(1_000_000, 0, batch="b", cached=500_000), listed) == pytest.approx(0.5 * 1.0 + 0.5 * 0.5)
    own = {"m": Price(input=2.0, output=8.0, batch_input=1.5, batch_output=2.0)}
    assert event_cost(batched, own) == pytest.approx(3.5)
    assert event_cost(_call(1000, 1000, batch="b", hit=True), listed) == 0.0  # a cache hit is free either way


def test_the_ledger_counts_batch_calls_and_what_they_saved_and_shows_them_only_when_there_are_some() -> None:
    prices = {"m": Price(input=2.0, output=8.0)}
    events = {"c0": [_call(1_000_000, 0, batch="b1"), _call(1_000_000, 0)],
              "c1": [_call(0, 1_000_000).model_dump(mode="json") | {"data": {"batch": "b2"}}]}
    lines = ledger(events, prices)
    tot = condition_totals(lines)
    assert (tot["c0"].calls, tot["c0"].batch_calls) == (2, 1)
    assert tot["c0"].usd == pytest.approx(1.0 + 2.0) and tot["c0"].usd_saved_by_batch == pytest.approx(1.0)
    assert tot["c1"].usd == pytest.approx(4.0) and tot["c1"].usd_saved_by_batch == pytest.approx(4.0)
    table = ledger_table(lines, ["c0", "c1"], True)
    assert table is not None and table.columns[-2:] == ["batch_calls", "usd_saved_by_batch"]
    plain = ledger_table(ledger({"c0": [_call(10, 10)]}, prices), ["c0"], True)
    assert plain is not None and "batch_calls" not in plain.columns
    line = batch_line(lines, priced=True)
    assert line == "Batches answered 2 of 3 requests sent; at the batch price they cost $7.0000, $5.0000 less " \
                   "than sent one by one ($12.0000)."
    assert batch_line(ledger({"c0": [_call(10, 10)]}, prices), priced=True) is None


def test_the_planner_prices_and_times_the_same_calls_in_batches() -> None:
    profiles = [CostProfile("c0", "m", 20, 10_000, 1_000)]
    prices = {"m": Price(input=2.0, output=8.0)}
    direct = cost_projection(profiles, 100, prices)[-1]["usd"]
    batched = cost_projection(profiles, 100, prices, batch=True)[-1]["usd"]
    assert direct == pytest.approx(100 * (10_000 * 2 + 1_000 * 8) / 1e6) and batched == pytest.approx(direct / 2)
    # 2,000 calls, 100 questions in flight, each call a batch's turnaround (60 s to fill + 3600 s).
    assert batch_wall_time_s(profiles, 100, batch_latency_s=3600, max_wait_s=60, in_flight=100) == \
        pytest.approx(2000 * 3660 / 100)


def test_medpanel_plan_prints_the_estimate_with_batching(tmp_path: Path) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_text(SCENARIO)
    res = medpanel.run(sc, run_dir=tmp_path / "pilot", limit=None, workers=1)
    rc, out, err = invoke(["plan", str(sc), "--pilot", str(res.run_dir), "--batch-latency", "1800"])
    assert rc == 0, err
    line = next(ln for ln in out.splitlines() if "with batching" in ln)
    total = next(ln for ln in out.splitlines() if ln.strip().startswith("cost total"))
    usd = float(total.split("$")[1].replace(",", ""))
    assert f"${usd / 2:,.2f}" in line and "model.batch off in this scenario" in line
    assert "1800 s a batch + 10 s to fill it" in line and "at 3 questions in flight" in line
    rc, _out, err = invoke(["plan", str(sc), "--pilot", str(res.run_dir), "--batch-latency", "-1"])
    assert rc == 2 and "--batch-latency" in err and err.count("\n") == 1


@pytest.mark.parametrize(("block", "words"), [
    ("{backend: scripted, batch: {enabled: true}}", "batch.enabled needs backend openai"),
    ("{backend: openai, batch: {enabled: true, max_wait_s: 0}}", "model.batch.max_wait_s"),
    ("{backend: openai, batch: {enabled: true, max_requests: 60000}}", "model.batch.max_requests"),
    ("{backend: openai, batch: {enabled: true, completion_window: 1h}}", "model.batch.completion_window"),
    ("{backend: openai, batch: {enabeld: true}}", "model.batch.enabeld"),
])
def test_a_bad_batch_block_is_one_line_naming_the_field(tmp_path: Path, block: str, words: str) -> None:
    sc = write(tmp_path / "s.yaml", f"name: b\npipeline: generalist\ndataset: {{source: sample}}\nmodel: {block}\n")
    rc, _out, err = invoke(["validate", str(sc)])
    assert rc == 2 and words in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_the_ledger_prices_each_call_at_its_own_rate_whatever_came_before_it() -> None:
    # The ledger prices a (model, batch) pair once: a batch call, a cache hit of a batch call and a
    # direct call of one model, in any order, cost what each costs alone.
    prices = {"m": Price(input=2.0, output=8.0, batch_input=0.5, batch_output=1.0)}
    calls = [_call(1_000_000, 1_000_000, batch="b1"), _call(1_000_000, 1_000_000, batch="b2", hit=True),
             _call(1_000_000, 1_000_000)]
    alone = [condition_totals(ledger({"c0": [c]}, prices))["c0"] for c in calls]
    for order in ([0, 1, 2], [2, 1, 0], [1, 2, 0]):
        tot = condition_totals(ledger({"c0": [calls[i] for i in order]}, prices))["c0"]
        assert tot.usd == pytest.approx(sum(a.usd for a in alone)) == pytest.approx(1.5 + 10.0)
        assert tot.usd_saved == pytest.approx(sum(a.usd_saved for a in alone)) == pytest.approx(10.0)
        assert tot.usd_saved_by_batch == pytest.approx(10.0 - 1.5)
