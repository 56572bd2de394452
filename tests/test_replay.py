"""Exact replay (`medpanel run --replay RUN_DIR`): a replayed run calls no model and writes the same
transcripts and tables as the original, timestamps and latencies apart; misses are counted, and a
strict replay stops at the first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from medpanel.agents.model.replay import Replay
from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest
from medpanel.experiments.analysis.report import build_tables
from medpanel.experiments.analysis.study import transcript_events
from medpanel.experiments.cli.main import main
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import Plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.rundir import load_run
from medpanel.experiments.run.store.transcript_log import documents

from .inspect_fixtures import GRID_QUESTIONS, _grid_responder

TIMING = {"t", "latency_s", "model_s_per_q"}
"""Fields that record when and how fast, not what: kept out of the comparison."""


def make_runner(run_dir: Path, rounds: int = 1) -> Runner:
    scenario = Scenario(name="replay", pipeline="panel", flags={"c": [0, 1], "r": [0, 1]},
                        settings={"rounds": rounds, "turns_per_round": 1}, model={"backend": "scripted"},
                        run={"workers": 1})
    plan = Plan(scenario=scenario, conditions=scenario.conditions(), questions=GRID_QUESTIONS[:3], repeats=1,
                shard_size=4)
    return Runner.create(plan, run_dir=run_dir)


def no_model(_request: ScriptedRequest) -> Any:
    raise AssertionError("the model was called during a replay")


def _by_pair(run_dir: Path) -> dict[tuple[Any, ...], Any]:
    """Each transcript of a run by its (condition, dataset, qid, repeat)."""
    docs = [json.loads(raw) for raw in documents(run_dir)]
    return {(d["condition"], d["question"]["dataset"], d["question"]["qid"], d["repeat"]): d for d in docs}


def strip(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {k: strip(v) for k, v in doc.items() if k not in TIMING}
    if isinstance(doc, list):
        return [strip(v) for v in doc]
    return doc


def tables_of(run_dir: Path) -> list[Any]:
    d = load_run(run_dir)
    out = []
    for t in build_tables(d.rows, d.record, n_boot=200, events=transcript_events(run_dir)):
        keep = [i for i, c in enumerate(t.columns) if c not in TIMING]
        out.append((t.title, [t.columns[i] for i in keep], [[r[i] for i in keep] for r in t.rows]))
    return out


def original(tmp_path: Path) -> Path:
    runner = make_runner(tmp_path / "original")
    runner.client_factory = lambda spec: ScriptedChatCompletionClient(_grid_responder())
    assert runner.run(install_signals=False)["state"] == "complete"
    return runner.run_dir


def test_replay_writes_identical_transcripts_and_tables_without_a_model(tmp_path: Path) -> None:
    src = original(tmp_path)
    runner = make_runner(tmp_path / "replayed")
    runner.client_factory = lambda spec: ScriptedChatCompletionClient(no_model)
    runner.replay = Replay(src)
    assert runner.run(install_signals=False)["state"] == "complete"
    sent = [e for raw in documents(src)
            for e in json.loads(raw)["events"] if e["kind"] == "call" and not e["cache_hit"]]
    assert runner.replay.misses == 0 and runner.replay.hits == len(sent) > 0
    a, b = _by_pair(src), _by_pair(runner.run_dir)
    assert a.keys() == b.keys() and len(a) == 12
    for key in a:
        assert strip(a[key]) == strip(b[key]), key
    assert tables_of(src) == tables_of(runner.run_dir)


def test_changed_setting_misses_are_counted_and_strict_stops(tmp_path: Path) -> None:
    src = original(tmp_path)
    # Two rounds: round 1 is the original's (answered from it), round 2 was never asked.
    runner = make_runner(tmp_path / "changed", rounds=2)
    runner.client_factory = lambda spec: ScriptedChatCompletionClient(_grid_responder())
    runner.replay = Replay(src)
    assert runner.run(install_signals=False)["state"] == "complete"
    assert runner.replay.hits > 0 and runner.replay.misses > 0
    strict = make_runner(tmp_path / "strict", rounds=2)
    strict.client_factory = lambda spec: ScriptedChatCompletionClient(no_model)
    strict.replay = Replay(src, strict=True)
    status = strict.run(install_signals=False)
    assert status["state"] != "complete" and "--replay-strict" in status["reason"]
    assert not load_run(strict.run_dir).rows or all(not r.error for r in load_run(strict.run_dir).rows)


def test_replay_of_a_folder_that_is_no_run_is_one_line(tmp_path: Path, capsys: Any) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_text("name: x\npipeline: generalist\nflags: {c: [0, 1]}\ndataset: {source: sample, limit: 1}\n"
                  "model: {backend: scripted}\n")
    try:
        main(["run", str(sc), "--replay", str(tmp_path / "nope"), "--quiet", "--run-dir", str(tmp_path / "r")])
    except SystemExit as exc:
        assert exc.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a run directory" in err
