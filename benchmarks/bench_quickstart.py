"""Where the quickstart's time goes, before and after tuning the embedded server.

    python -m benchmarks.bench_quickstart [--configs before,after] [--repeat 1]

Each configuration runs `medpanel run scenarios/quickstart.yaml` (24 pairs, 4 workers, the
embedded SmolLM2 on llama-server) in a fresh run directory, through the CLI as a user runs it, and
prints:
- wall time, and CPU time of the runner and of llama-server apart (the server's from /proc, sampled
  until it exits, counting only the server this run started; the runner's is the rest of the
  children's CPU);
- server start: from launch until llama-server listens (its log's own timestamp), the model loaded;
- prompt tokens the server evaluated and those it took from its cache (the `prompt eval` lines of
  its log against the calls' prompt tokens in the transcripts), the server's prompt-eval and decode
  milliseconds (summed over requests; requests overlap in the slots, so these add to more than the
  wall time when several decode at once);
- calls, accuracy per condition and the answers' digest: tuning must change neither.

`before` passes llama-server's options as medpanel set them before (one compute thread on 2
cores, no chunk reuse, llama.cpp's batch sizes) through MEDPANEL_LLAMA_SERVER_ARGS, whose options
come last and win; `after` passes nothing, so it measures the defaults; `two-threads` gives the
server both cores. Target: <= 30 s wall on a quiet 2-core machine.

Two runs of one configuration may differ in calls and answers: llama-server decodes up to 4
requests in one batch, which requests share a batch depends on timing, and a batch rounds
differently from a request alone. The answers' digest tells whether two runs answered alike.
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

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 30.0
CONFIGS = {
    "before": "--threads 1 --threads-batch 1 --cache-reuse 0 --batch-size 2048 --ubatch-size 512",
    "after": "",
    "two-threads": "--threads 2 --threads-batch 2",
}
PROMPT_EVAL = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
EVAL = re.compile(r"\|\s+eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
LISTENING = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) I srv\s+llama_server: listening", re.M)
TICK = os.sysconf("SC_CLK_TCK")


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


def one_run(extra: str) -> dict[str, Any]:
    env = dict(os.environ, MEDPANEL_LLAMA_SERVER_ARGS=extra)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "qs"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        stop, cpu = threading.Event(), {}  # type: ignore[var-annotated]
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "medpanel", "run", str(ROOT / "scenarios" / "quickstart.yaml"),
                                 "--run-dir", str(run_dir), "--quiet"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        sampler = threading.Thread(target=_server_cpu, args=(proc.pid, stop, cpu), daemon=True)
        sampler.start()
        _, err = proc.communicate(timeout=1800)
        wall = time.perf_counter() - start
        stop.set()
        sampler.join()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(f"quickstart failed ({proc.returncode}): {err[-2000:]}")
        children = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        log = (run_dir / "local_server.log").read_text(errors="replace")
        with sqlite3.connect(run_dir / "study.db") as conn:
            rows = conn.execute("select condition, qid, answer, correct, invalid, error from mp_results "
                                "order by condition, qid").fetchall()
        calls = prompt_total = 0
        for doc_path in (run_dir / "transcripts").rglob("*.json"):
            doc = json.loads(doc_path.read_text(encoding="utf-8"))
            for e in doc["events"]:
                if e["kind"] == "call":
                    calls += 1
                    prompt_total += int((e.get("usage") or {}).get("prompt_tokens") or 0)
    evals = [(float(ms), int(n)) for ms, n in PROMPT_EVAL.findall(log)]
    decodes = [(float(ms), int(n)) for ms, n in EVAL.findall(log)]
    server_cpu = sum(cpu.values())
    ready = LISTENING.search(log)
    started = (int(ready[1]) * 60 + int(ready[2]) + int(ready[3]) / 1e3) if ready else float("nan")
    accuracy: dict[str, str] = {}
    for cond in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == cond]
        accuracy[cond] = f"{sum(1 for r in mine if r[3])}/{len(mine)}"
    digest = hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:12]
    return {"wall": wall, "cpu": children, "server_start": started, "server_cpu": server_cpu,
            "runner_cpu": children - server_cpu,
            "prompt_evaluated": sum(n for _, n in evals), "prompt_total": prompt_total,
            "prompt_ms": sum(ms for ms, _ in evals), "decode_ms": sum(ms for ms, _ in decodes),
            "decoded": sum(n for _, n in decodes), "requests": len(evals), "calls": calls,
            "accuracy": accuracy, "digest": digest,
            "errors": sum(1 for r in rows if r[5]), "invalid": sum(1 for r in rows if r[4])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default="before,after", help="comma-separated, from: " + ", ".join(CONFIGS))
    ap.add_argument("--repeat", type=int, default=1, help="runs per configuration (the fastest is shown)")
    args = ap.parse_args()
    names = [c for c in args.configs.split(",") if c]
    unknown = set(names) - set(CONFIGS)
    if unknown:
        raise SystemExit(f"--configs: unknown {sorted(unknown)}; use {', '.join(CONFIGS)}")
    print(f"quickstart: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} before")
    results: dict[str, dict[str, Any]] = {}
    for name in names:
        runs = [one_run(CONFIGS[name]) for _ in range(args.repeat)]
        r = results[name] = min(runs, key=lambda x: x["wall"])
        cached = r["prompt_total"] - r["prompt_evaluated"]
        print(f"\n{name}: MEDPANEL_LLAMA_SERVER_ARGS='{CONFIGS[name]}'")
        print(f"  wall {r['wall']:6.1f} s (target <= {TARGET_S:.0f} s: ratio {r['wall'] / TARGET_S:.2f}); CPU "
              f"{r['cpu']:6.1f} s = llama-server {r['server_cpu']:6.1f} s + runner {r['runner_cpu']:5.1f} s")
        print(f"  server start {r['server_start']:.1f} s (model loaded, listening)")
        print(f"  prompt tokens {r['prompt_total']} in {r['requests']} requests: {r['prompt_evaluated']} evaluated "
              f"({r['prompt_ms'] / 1000:.1f} s), {cached} from the slots' cache; decoded {r['decoded']} tokens "
              f"({r['decode_ms'] / 1000:.1f} s, summed over slots)")
        print(f"  calls {r['calls']}, accuracy {r['accuracy']}, invalid {r['invalid']}, errors {r['errors']}, "
              f"answers {r['digest']}")
        print(f"  load average {os.getloadavg()[0]:.2f}")
    if {"before", "after"} <= set(results):
        b, a = results["before"], results["after"]
        same = b["calls"] == a["calls"] and b["digest"] == a["digest"]
        print(f"\nafter / before: wall {a['wall'] / b['wall']:.2f}x, CPU {a['cpu'] / b['cpu']:.2f}x; "
              f"same calls and answers: {same}")


if __name__ == "__main__":
    main()
