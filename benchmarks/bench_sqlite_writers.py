"""SQLite's one writer under a run's write pattern: many threads, in one or more processes.

    python -m benchmarks.bench_sqlite_writers [--processes 2] [--threads 32] [--txns 300]

Each thread has its own connection (as the store's pool gives each of its threads) to one WAL
database with `busy_timeout` (as `storage.py` sets) and commits one small insert at a time, as a
claim does, with 2 ms of other work between. Two ways are measured, each process printing its
own line: every connection racing for the write lock through SQLite's busy handler (what the
store did before `store/sqlite_writes.py`), and the process's writers taking one `threading.Lock` first, so only one
connection per process waits in SQLite's busy handler, whose sleeps grow to 100 ms instead of
queueing. The wall time of a transaction in its thread is printed: mean, p99 and longest.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def writers(path: Path, threads: int, txns: int, serialise: bool) -> str:
    lock = threading.Lock()
    waits: list[float] = []

    def worker(i: int) -> None:
        db = sqlite3.connect(path, timeout=60, check_same_thread=False)
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA busy_timeout=60000")
        for j in range(txns):
            t = time.perf_counter()
            with lock if serialise else contextlib.nullcontext():
                db.execute("INSERT INTO t VALUES (?, ?) ON CONFLICT DO NOTHING", (f"{os.getpid()}-{i}-{j}", t))
                db.commit()
            waits.append(time.perf_counter() - t)
            time.sleep(0.002)  # the rest of a question's work between two writes
        db.close()

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    t0 = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    wall = time.perf_counter() - t0
    waits.sort()
    return (f"{'one lock per process' if serialise else 'busy handler only':>21}: {threads * txns / wall:6.0f} txn/s, "
            f"mean {statistics.mean(waits) * 1000:.2f} ms, p99 {waits[int(0.99 * len(waits))] * 1000:.1f} ms, "
            f"longest {waits[-1] * 1000:.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--threads", type=int, default=32, help="per process (the store: 4 workers x 8)")
    ap.add_argument("--txns", type=int, default=300, help="per thread")
    ap.add_argument("--child", nargs=2, metavar=("DB", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(writers(Path(args.child[0]), args.threads, args.txns, args.child[1] == "lock"), flush=True)
        return
    print(f"{os.cpu_count()} cores; load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"{args.processes} processes x {args.threads} threads x {args.txns} transactions")
    for mode in ("busy", "lock"):
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "w.db"
            with contextlib.closing(sqlite3.connect(db)) as conn:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v REAL)")
                conn.commit()
            procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.bench_sqlite_writers", "--threads",
                                       str(args.threads), "--txns", str(args.txns), "--child", str(db), mode])
                     for _ in range(args.processes)]
            for p in procs:
                p.wait()


if __name__ == "__main__":
    main()
