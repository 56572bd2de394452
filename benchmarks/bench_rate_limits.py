"""How close to a provider's limits a run goes, and how rarely it meets a 429.

    python -m benchmarks.bench_rate_limits

Two runs of 30 synthetic questions x 2 conditions (8 workers, 20 ms a call) against the fake
endpoint wrapped in `fake_limits.RateLimited`, whose "minute" is one second:
- `rpm+tpm`: the server admits 40 requests and 8,000 tokens a window and the run is told the same
  limits (2,400 RPM, 480,000 TPM): the share of requests answered 429 (target < 2%) and the mean
  tokens of the full windows (target >= half the window's 8,000: the run keeps near the limit);
- `headers` vs `blind`: no limits configured, the server admits 25 requests a window, once with
  OpenAI's rate-limit headers on every reply and once without: the 429s of each (target: the
  headers alone keep 429s under 10%, and the blind run meets at least 2 more).
These are figures of the machine as much as of the code (a late request meets a window's edge
more often on a loaded machine), so they are measured here and not asserted by the tests, which
hold what the code guarantees: every 429 retried, nothing lost, every attempt recorded.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.fake_limits import RateLimited
from benchmarks.fake_server import FakeOpenAI, completion, schema_reply
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.store.store import Store


def _handler(body: dict[str, Any], n: int) -> tuple[int, dict[str, str], Any]:
    prompt = len(json.dumps(body.get("messages", []))) // 4
    return 200, {}, completion(json.dumps(schema_reply(body)), prompt_tokens=prompt, completion_tokens=20)


def run(folder: Path, server: RateLimited, run_block: str, n: int) -> int:
    """Run the grid against `server`; the attempts its transcripts record."""
    folder.mkdir(parents=True)
    data = folder / "q.jsonl"
    data.write_text("".join(json.dumps({"realidx": f"q{i}", "question": f"Synthetic question number {i}?",
                                        "options": {"A": "a", "B": "b", "C": "c", "D": "d"},
                                        "answer_idx": "ABCD"[i % 4]}) + "\n" for i in range(n)), encoding="utf-8")
    with FakeOpenAI(server, latency_ms=20) as srv:
        scenario = folder / "s.yaml"
        scenario.write_text(f"""name: limits
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: jsonl, path: {data}}}
model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}", api_key_env: FAKE_KEY, max_retries: 6,
        max_tokens: 128, cache: "off"}}
run: {{workers: 8, {run_block}}}
""", encoding="utf-8")
        runner = Runner.create(make_plan(load_scenario(scenario), base_dir=folder), run_dir=folder / "run")
        runner.run(install_signals=False)
    store = Store(runner.storage_url, runner.run_dir)
    return sum(e["attempts"] for doc in store.iter_transcripts() for e in doc["events"] if e["kind"] == "call")


def main() -> None:
    os.environ.setdefault("FAKE_KEY", "not-a-secret")
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        limited = RateLimited(_handler, requests=40, tokens=8000, window_s=1.0)
        attempts = run(root / "limits", limited, "requests_per_minute: 2400, tokens_per_minute: 480000", 30)
        share = limited.refused / attempts
        busy = [tok for w, (_, tok) in limited.per_window.items() if 0 < w < max(limited.per_window)]
        mean_busy = sum(busy) / len(busy) if busy else 0.0
        print(f"rpm+tpm: {attempts} requests, {limited.refused} answered 429 ({share:.1%}; target < 2%, ratio "
              f"{share / 0.02:.2f}); full windows carried {mean_busy:.0f} tokens on average (target >= 4000, "
              f"ratio {mean_busy / 4000:.2f})")
        headers = RateLimited(_handler, requests=25, window_s=1.0)
        with_h = run(root / "headers", headers, "max_errors: 0", 20)
        blind = RateLimited(_handler, requests=25, window_s=1.0, send_headers=False)
        without = run(root / "blind", blind, "max_errors: 0", 20)
        print(f"headers: {headers.refused}/{with_h} answered 429 ({headers.refused / with_h:.1%}; target < 10%); "
              f"blind: {blind.refused}/{without} (target: at least 2 more than with headers: "
              f"{'met' if blind.refused >= headers.refused + 2 else 'missed'})")
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
