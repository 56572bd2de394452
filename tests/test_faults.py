"""A 4-worker run against a real HTTP server that fails 20% of requests in every way it can."""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from medpanel.experiments.analysis.report import errors_table
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.store import Store

from .conftest import write
from .fake_openai import FakeOpenAI, completion

FAULTS = ["429", "500", "timeout", "drop", "truncated", "schema", "empty"]


class Faulty:
    """Answers correctly, except a seeded 20% of requests get one of the seven faults."""

    def __init__(self, rate: float = 0.2, seed: int = 7) -> None:
        self.rate = rate
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.injected: Counter[str] = Counter()

    def __call__(self, body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
        with self.lock:
            fault = self.rng.choice(FAULTS) if self.rng.random() < self.rate else None
            if fault:
                self.injected[fault] += 1
        if fault == "429":
            return 429, {"retry-after": "0"}, {"error": {"message": "rate limited", "type": "rate_limit"}}
        if fault == "500":
            return 500, {}, {"error": {"message": "internal"}}
        if fault == "timeout":
            time.sleep(1.6)
        if fault == "drop":
            return 0, {}, ""
        if fault == "truncated":
            return 200, {}, '{"id": "chatcmpl-x", "object": "chat.completion", "choices": [{"index": 0, "mess'
        if fault == "schema":
            return 200, {}, completion("I am not going to answer in JSON.")
        if fault == "empty":
            body_ = completion("")
            body_["choices"] = []
            return 200, {}, body_
        schema = body.get("response_format", {}).get("json_schema", {}).get("schema", {})
        props = schema.get("properties", {})
        if "material_weakness" in props:
            reply = {"material_weakness": True, "gap_type": "missing_differential", "challenge": "Consider more."}
        else:
            letters = props.get("answer", {}).get("enum", ["A"])
            reply = {"reasoning": "because", "answer": letters[len(json.dumps(body)) % len(letters)]}
        return 200, {}, completion(json.dumps(reply))


def _questions(path: Path, n: int = 40) -> Path:
    lines = [json.dumps({"realidx": f"q{i}", "question": f"Synthetic question {i}?",
                         "options": {"A": "a", "B": "b", "C": "c", "D": "d"}, "answer_idx": "ABCD"[i % 4]})
             for i in range(n)]
    return write(path, "\n".join(lines) + "\n")


def test_twenty_percent_faults_every_pair_recorded_once(tmp_path: Path) -> None:
    data = _questions(tmp_path / "faulty.jsonl")
    fault = Faulty()
    with FakeOpenAI(fault) as srv:
        f = write(tmp_path / "s.yaml", f"""name: faults
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: jsonl, path: {data}}}
model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}", max_retries: 2, cache: "off"}}
run: {{workers: 4, per_call_timeout_s: 1.0}}
""")
        runner = Runner.create(make_plan(load_scenario(f), base_dir=tmp_path), run_dir=tmp_path / "run")
        status = runner.run(install_signals=False)
    assert status["state"] == "complete"
    assert all(fault.injected[k] > 0 for k in FAULTS), fault.injected
    store = Store(runner.storage_url, runner.run_dir)
    rows = store.rows()
    assert len(rows) == 80 and len({(r.condition, r.qid) for r in rows}) == 80
    assert max(Counter(store.executions()).values()) == 1
    for r in rows:
        # a result (answer or an explicit invalid) or an explicit error row, never a silent gap
        assert r.answer or r.invalid or r.error
        if r.error:
            assert r.error_kind in {"rate_limit", "server_error", "timeout", "connection", "bad_response"}
    retried = [e for doc in store.iter_transcripts() for e in doc["events"] if e["kind"] == "call"
               and e["attempts"] > 1]
    assert retried, "no call was retried under a 20% fault rate"
    reasks = [e for doc in store.iter_transcripts() for e in doc["events"] if e["step"].endswith(":reask")]
    assert reasks, "schema-breaking replies must get a re-ask"
    table = errors_table(rows)
    if any(r.error for r in rows):
        assert table is not None and sum(row[2] for row in table.rows) == sum(1 for r in rows if r.error)
    with sqlite3.connect(runner.run_dir / "study.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
