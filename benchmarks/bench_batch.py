"""Calls, wall time and price of a 2x2 run sent directly and sent in batches (`model.batch`).

    python -m benchmarks.bench_batch [--batch-latency 3] [--call-latency 0.2]

The panel's 2x2 (c x r, one round) on the 12 built-in questions, against the local fake of the
Batch API (`fake_batch.py`), whose direct calls take `--call-latency` seconds and whose batches
take `--batch-latency` seconds, with the replies valid for every schema (the fake's plain draw).
Both runs send the same requests (the response cache off, so each condition sends its own);
prices are gpt-4o-mini's listed ones ($0.15 / $0.60 per million tokens), the batch's half of them.
What it shows is the trade: the batched run pays half and waits a batch's turnaround per step of
its debates (every step of the 48 debates in flight goes out together), so its wall time is steps
x (max_wait_s + batch latency + a poll), not calls x call latency / width.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from benchmarks.fake_batch import FakeBatch
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.store import Store

PRICE = {"input": 0.15, "output": 0.60}


def run(folder: Path, url: str, batch: bool) -> dict[str, float]:
    block = "batch: {enabled: true, max_wait_s: 0.5, poll_s: 0.25}, " if batch else ""
    scenario = folder / f"batch-{batch}.yaml"
    scenario.write_text(f"""name: bench-batch
pipeline: panel
flags: {{c: [0, 1], r: [0, 1]}}
settings: {{rounds: 1, turns_per_round: 1}}
dataset: {{source: sample}}
model: {{backend: openai, name: fake-model, base_url: "{url}", api_key_env: FAKE_KEY, {block}cache: "off"}}
run: {{workers: 1, questions_per_worker: 48, prices: {{fake-model: {json.dumps(PRICE)}}}}}
""", encoding="utf-8")
    runner = Runner.create(make_plan(load_scenario(scenario), base_dir=folder), run_dir=folder / f"run-{batch}")
    start = time.perf_counter()
    state = runner.run(install_signals=False)["state"]
    wall = time.perf_counter() - start
    store = Store(runner.storage_url, runner.run_dir)
    rows = store.rows()
    calls = sum(e["attempts"] for doc in store.iter_transcripts() for e in doc["events"] if e["kind"] == "call")
    return {"state": state, "pairs": len(rows), "calls": calls, "wall_s": wall, "usd": sum(r.cost_usd for r in rows)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-latency", type=float, default=3.0, help="seconds a batch takes to end")
    ap.add_argument("--call-latency", type=float, default=0.2, help="seconds a direct call takes")
    args = ap.parse_args()
    os.environ["FAKE_KEY"] = "sk-bench"
    with tempfile.TemporaryDirectory() as tmp, \
            FakeBatch(latency_s=args.batch_latency, direct_latency_s=args.call_latency) as fake:
        direct = run(Path(tmp), fake.base_url, batch=False)
        batched = run(Path(tmp), fake.base_url, batch=True)
        batches = len(fake.batches)
    print(f"2x2 panel (c x r, 1 round) on 12 questions = 48 pairs; direct call {args.call_latency:g} s, "
          f"batch {args.batch_latency:g} s (+0.5 s to fill, 0.25 s polls)")
    print(f"{'mode':8s} {'pairs':>5s} {'calls':>6s} {'batches':>7s} {'wall_s':>7s} {'usd':>10s}")
    for name, r, b in (("direct", direct, 0), ("batched", batched, batches)):
        print(f"{name:8s} {r['pairs']:5.0f} {r['calls']:6.0f} {b:7d} {r['wall_s']:7.1f} {r['usd']:10.6f}")
    if direct["usd"]:
        print(f"batched/direct price: {batched['usd'] / direct['usd']:.3f}")


if __name__ == "__main__":
    main()
