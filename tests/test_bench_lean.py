"""The side-by-side benchmark runs both harnesses on the same questions: every question answered
exactly once by each, the endpoint's count equal to the harnesses' own, inspect_ai's log holding
every sample. Speed figures belong to the benchmark (`python -m benchmarks.bench_lean`), not here."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.bench_lean import figures, messages_and_schema, question_records, run_harness, served
from benchmarks.fake_server import served_apart

N = 24


def test_both_harnesses_answer_every_question_once_through_the_same_endpoint(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("inspect_ai")
    monkeypatch.setenv("FAKE_API_KEY", "sk-no-key")  # the openai-api provider's key for service "fake"
    from benchmarks.bench_lean import run_inspect, run_medpanel

    records = question_records(N)
    with served_apart(0.0, concurrency=8) as base_url:
        mp = run_medpanel(base_url, records, 8, tmp_path / "mp")
        after_mp = served(base_url)
        ins = run_inspect(base_url, records, 8, tmp_path / "inspect")
        after_inspect = served(base_url)
    ids = sorted(r["realidx"] for r in records)
    assert mp["state"] == "complete" and mp["rows"] == N and mp["transcripts"] == N
    assert mp["executions"] == mp["distinct_executions"] == N, "a question ran twice or not at all"
    assert mp["answered"] == ids and mp["harness_calls"] == after_mp == N
    assert ins["state"] == "success" and ins["rows"] == N
    assert ins["answered"] == ids, "inspect_ai's log is missing samples or answers"
    assert after_inspect - after_mp == N == ins["harness_calls"]


def test_the_two_harnesses_are_sent_the_same_messages_and_schema() -> None:
    system, user, fmt = messages_and_schema(question_records(3)[2])
    assert "Benchmark question 2" in user and "(D) option d of question 2" in user
    assert system and "Benchmark" not in system
    schema = fmt["json_schema"]["schema"]
    assert fmt["type"] == "json_schema" and schema["properties"]["answer"]["enum"] == ["A", "B", "C", "D"]


def test_a_child_run_reports_what_the_endpoint_served() -> None:
    with served_apart(0.0, concurrency=4) as base_url:
        r = run_harness("medpanel", base_url, 12, 4)
    assert (r["calls"], r["rows"], r["harness_calls"], r["distinct_executions"]) == (12, 12, 12, 12)
    f = figures(r, 0.0)
    assert f["cpu_ms"] > 0 and r["load_start"] and r["load_end"]


def test_the_rounds_bound_is_the_best_efficiency_sequential_lanes_allow() -> None:
    from benchmarks.bench_lean import rounds_bound

    assert rounds_bound(300, 64) == 300 / 320  # five rounds of 64 for 300 calls
    assert rounds_bound(128, 64) == 1.0
    assert abs(rounds_bound(3000, 64) - 3000 / 3008) < 1e-12
