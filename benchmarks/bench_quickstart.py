"""The quickstart's wall time on the embedded model: quiet, and with another process busy on a core.

    python -m benchmarks.bench_quickstart [--configs single,pool] [--repeat 1] [--no-busy]

Each configuration runs `medpanel run scenarios/quickstart.yaml` (24 pairs, 4 workers, the
embedded SmolLM2 on llama-server) in a fresh run directory, through the CLI as a user runs it, once
on a quiet machine and once beside `python -c 'while 1: pass'` (a program holding one core), and
prints:
- wall time against the targets (<= 45 s quiet, <= 60 s busy on 2 cores) and against the floor for
  the run's tokens: the prompt tokens the servers evaluated and the tokens they decoded, at the
  speed of one llama-server thread measured alone at the start (`calibrate`), divided by the cores;
- CPU time of the runner and of the llama-servers apart (the servers' from /proc, sampled until they
  exit, counting only the servers this run started);
- prompt tokens evaluated and taken from the slots' cache, decoded tokens (calls answered from the
  run's own cache reach no server and are not counted);
- the floor again with an unbounded prefix cache: each request, in the order sent, evaluating only
  what follows its longest prefix in common with any earlier request (`perfect_cache_share`), so
  what no routing or slot layout could save is shown beside what the layout saved;
- calls, accuracy per condition and the answers' digest for every run: a layout must change neither;
- the load average beside every figure (other programs on the machine slow every figure).

Configurations (`--set` keys of the scenario's model): `single` is the layout medpanel had before,
one llama-server with one thread fewer than the cores and all four slots; `pool` is the default,
four single-threaded servers of one slot each (agents/model/cores.py); `two-threads` is one server
with two threads, the layout that collapses when anything else runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from medpanel.agents.model.llama_server import LlamaServer
from medpanel.experiments.run.store.transcript_log import documents

ROOT = Path(__file__).resolve().parents[1]
TARGET_QUIET_S, TARGET_BUSY_S = 45.0, 60.0
CONFIGS = {
    "single": ["model.local_servers=1"],
    "pool": [],
    "two-threads": ["model.local_servers=1", "model.local_threads=2"],
}
BUSY = "while 1: pass"
PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
EVAL = re.compile(r"\|\s+eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
TICK = os.sysconf("SC_CLK_TCK")


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def _stat(pid: str) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, ...), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return [stat[stat.index("(") + 1:stat.rindex(")")], *stat.rsplit(")", 1)[1].split()]


def _descends_from(pid: str, root: int) -> bool:
    for _ in range(8):
        fields = _stat(pid)
        if fields is None:
            return False
        pid = fields[2]
        if int(pid) == root:
            return True
    return False


def _server_cpu(root: int, stop: threading.Event, out: dict[str, float]) -> None:
    """Sample the CPU seconds of the llama-server started under `root` until `stop` is set (other
    llama-servers on the machine are not counted)."""
    while not stop.is_set():
        for pid in os.listdir("/proc"):
            if pid.isdigit() and pid not in out:
                fields = _stat(pid)
                if fields is None or fields[0] != "llama-server" or not _descends_from(pid, root):
                    continue
                out[pid] = 0.0
        for pid in list(out):
            fields = _stat(pid)
            if fields is not None:
                out[pid] = (int(fields[12]) + int(fields[13])) / TICK
        time.sleep(0.1)


def calibrate() -> tuple[float, float]:
    """(prompt tokens/s, decoded tokens/s) of one llama-server thread alone: one server, one
    thread, one slot, a long prompt once to warm it and once measured, from the server's own timings."""
    prompt = "Describe the anatomy of the heart, its chambers, valves and vessels. " * 40
    with LlamaServer(n_ctx=4096, parallel=1, n_threads=1) as server:
        url = server.base_url + "/chat/completions"
        for _ in range(2):
            # cache_prompt off: the second request evaluates the whole prompt again.
            reply = httpx.post(url, json={"messages": [{"role": "user", "content": prompt}], "max_tokens": 96,
                                          "temperature": 0, "cache_prompt": False, "ignore_eos": True},
                               timeout=300).json()
    timings = reply["timings"]
    return float(timings["prompt_per_second"]), float(timings["predicted_per_second"])


def _chat_text(messages: list[dict[str, Any]]) -> str:
    """A request's messages as one string in their order (roles and contents), for prefix comparison."""
    return "".join(f"\x00{m.get('role')}\x01{m.get('content')}" for m in messages) + "\x00assistant\x01"


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # the longest equal prefix, by halving: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if a[:mid] == b[:mid] else (lo, mid)
    return lo


def perfect_cache_share(requests: list[tuple[float, str]]) -> float:
    """The share of prompt characters a server with an unbounded prefix cache would still evaluate:
    each request in the order it was sent pays only for what follows its longest prefix in common
    with any earlier request. Converted to tokens at the run's own ratio, it is the floor of prompt
    work no routing or slot layout can go below without sending other prompts."""
    ordered = [text for _, text in sorted(requests, key=lambda r: r[0])]
    total = sum(len(t) for t in ordered)
    fresh = 0
    for i, text in enumerate(ordered):
        fresh += len(text) - max((_common_prefix(text, earlier) for earlier in ordered[:i]), default=0)
    return fresh / total if total else 0.0


def one_run(sets: list[str], busy: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "qs"
        hog = subprocess.Popen([sys.executable, "-c", BUSY]) if busy else None
        try:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            stop, cpu = threading.Event(), {}  # type: ignore[var-annotated]
            load_before = load()
            start = time.perf_counter()
            cmd = [sys.executable, "-m", "medpanel", "run", str(ROOT / "scenarios" / "quickstart.yaml"),
                   "--run-dir", str(run_dir), "--quiet", *(x for kv in sets for x in ("--set", kv))]
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            sampler = threading.Thread(target=_server_cpu, args=(proc.pid, stop, cpu), daemon=True)
            sampler.start()
            _, err = proc.communicate(timeout=1800)
            wall = time.perf_counter() - start
            stop.set()
            sampler.join()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        if proc.returncode != 0:
            raise SystemExit(f"quickstart failed ({proc.returncode}): {err[-2000:]}")
        children = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        log = (run_dir / "local_server.log").read_text(errors="replace")
        layout = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["model"]["local_server"]
        with sqlite3.connect(run_dir / "study.db") as conn:
            rows = conn.execute("select condition, qid, answer, correct, invalid, error from mp_results "
                                "order by condition, qid").fetchall()
        calls = prompt_total = 0
        sent: list[tuple[float, str]] = []  # (when, the request's text) of the calls the servers answered
        for raw in documents(run_dir):  # the workers' transcript logs (or an older run's files)
            doc = json.loads(raw)
            for e in doc["events"]:
                if e["kind"] == "call":
                    calls += 1
                    if not e.get("cache_hit"):  # a reply from the run's cache never reached a server
                        prompt_total += int((e.get("usage") or {}).get("prompt_tokens") or 0)
                        sent.append((float(e.get("t") or 0.0), _chat_text(e.get("messages") or [])))
    evals = [(float(ms), int(n)) for ms, n in PROMPT_EVAL.findall(log)]
    decodes = [(float(ms), int(n)) for ms, n in EVAL.findall(log)]
    server_cpu = sum(cpu.values())
    accuracy: dict[str, str] = {}
    for cond in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == cond]
        accuracy[cond] = f"{sum(1 for r in mine if r[3])}/{len(mine)}"
    digest = hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:12]
    return {"wall": wall, "cpu": children, "server_cpu": server_cpu, "layout": layout,
            "load_before": load_before, "load_after": load(),
            "runner_cpu": children - server_cpu,
            "prompt_evaluated": sum(n for _, n in evals), "prompt_total": prompt_total, "sent": len(sent),
            "prompt_unbounded_cache": round(prompt_total * perfect_cache_share(sent)),
            "prompt_ms": sum(ms for ms, _ in evals), "decode_ms": sum(ms for ms, _ in decodes),
            "decoded": sum(n for _, n in decodes), "requests": len(evals), "calls": calls,
            "accuracy": accuracy, "digest": digest,
            "errors": sum(1 for r in rows if r[5]), "invalid": sum(1 for r in rows if r[4])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="single,pool", help="comma-separated, from: " + ", ".join(CONFIGS))
    ap.add_argument("--repeat", type=int, default=1, help="runs per configuration and load (the fastest is shown)")
    ap.add_argument("--no-busy", action="store_true", help="quiet runs only")
    args = ap.parse_args()
    names = [c for c in args.configs.split(",") if c]
    unknown = set(names) - set(CONFIGS)
    if unknown:
        raise SystemExit(f"--configs: unknown {sorted(unknown)}; use {', '.join(CONFIGS)}")
    cores = len(os.sched_getaffinity(0))
    print(f"quickstart: {cores} cores, {load()}")
    pps, dps = calibrate()
    print(f"one llama-server thread alone: prompt {pps:.0f} tok/s, decode {dps:.1f} tok/s ({load()})")
    digests: dict[tuple[str, int], str] = {}
    for name in names:
        print(f"\n{name}: --set {' --set '.join(CONFIGS[name]) or '(none)'}")
        for busy in ([False] if args.no_busy else [False, True]):
            runs = [one_run(CONFIGS[name], busy) for _ in range(args.repeat)]
            r = min(runs, key=lambda x: x["wall"])
            floor = (r["prompt_evaluated"] / pps + r["decoded"] / dps) / cores
            target = TARGET_BUSY_S if busy else TARGET_QUIET_S
            lay = r["layout"]
            print(f"  {'busy ' if busy else 'quiet'} wall {r['wall']:6.1f} s (target <= {target:.0f} s: "
                  f"{r['wall'] / target:.2f}x; floor {floor:.1f} s: {r['wall'] / floor:.2f}x) "
                  f"[{r['load_before']} before, {r['load_after']} after]")
            print(f"        {lay.get('servers')} servers x {lay.get('threads')} threads x {lay.get('slots')} slots; "
                  f"CPU {r['cpu']:6.1f} s = llama-server {r['server_cpu']:6.1f} s + runner {r['runner_cpu']:5.1f} s")
            print(f"        prompt tokens {r['prompt_total']} in {r['requests']} requests: {r['prompt_evaluated']} "
                  f"evaluated, {r['prompt_total'] - r['prompt_evaluated']} from the slots' cache; "
                  f"decoded {r['decoded']}")
            best = (r["prompt_unbounded_cache"] / pps + r["decoded"] / dps) / cores
            print(f"        with an unbounded prefix cache about {r['prompt_unbounded_cache']} prompt tokens would "
                  f"still be evaluated: floor {best:.1f} s (decoding alone {r['decoded'] / dps / cores:.1f} s)")
            for x in runs:
                digests[(name, len(digests))] = f"{x['calls']}:{x['digest']}"
                print(f"        run: wall {x['wall']:.1f} s, calls {x['calls']}, accuracy {x['accuracy']}, "
                      f"invalid {x['invalid']}, errors {x['errors']}, answers {x['digest']}")
    print(f"\nsame calls and answers in every run: {len(set(digests.values())) == 1} "
          f"({len(set(digests.values()))} distinct of {len(digests)})")


if __name__ == "__main__":
    main()
