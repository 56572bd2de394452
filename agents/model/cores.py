"""The embedded model on every core: several single-threaded `llama-server` processes, requests spread over them.

One llama-server with two compute threads on a 2-core machine is fast only while nothing else runs:
its threads meet at a barrier after every operation and spin while they wait, so a thread that loses
its core (to the runner, to a browser, to another study) stalls the other, and a run measured at
51 s took 125 s the next time. Independent processes with one thread each need no barrier: the
kernel shares the cores between them, a process that waits for its core delays only its own request,
and every core still works. So `backend: local` starts `servers` processes of `threads` threads
(`layout`), each with `slots` of the run's `local_parallel` requests, and the client sends each
request to the server with the fewest requests in flight (`spread.Spread`).

What the model is sent is unchanged; only where it runs changes. With one slot a server decodes one
request at a time, so no reply depends on which other requests shared its batch (the single
server's 4 slots made the quickstart's answers differ from run to run; the pool's did not).
The servers' URLs travel as one string (`POOL_SEP`-joined) wherever the single server's URL
went, so a run's other processes (`run.processes`) reach the same servers.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
from dataclasses import dataclass
from pathlib import Path

from medpanel.agents.model.llama_server import CACHE_RAM_MIB, LlamaServer
from medpanel.agents.model.local_server import StartedInWith
from medpanel.agents.model.spread import POOL_SEP

MIN_SERVERS = 4
"""Servers on a machine with fewer cores: four single-threaded processes on 2 cores keep both busy
while one waits for its core, and four is the quickstart's `run.workers`."""


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity, which `taskset` and cpusets narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class Layout:
    """How the embedded model is served: `servers` processes of `threads` threads, `slots` requests each."""

    servers: int
    threads: int
    slots: int
    cores: int

    def record(self) -> dict[str, int]:
        return {"servers": self.servers, "threads": self.threads, "slots": self.slots, "cores": self.cores}


def layout(parallel: int, cores: int, *, servers: int | None = None, threads: int | None = None) -> Layout:
    """The layout for `parallel` requests at once on `cores` cores; `servers` / `threads` are the
    user's `model.local_servers` / `model.local_threads` and win.

    Default: min(parallel, max(4, cores)) servers; each one thread, or more where cores are left
    over after one for the runner (16 cores, 4 servers: 3 threads each). One server alone keeps the
    layout medpanel had before: one thread fewer than the cores, all `parallel` slots."""
    n = servers or min(parallel, max(MIN_SERVERS, cores))
    t = threads or (max(1, cores - 1) if n == 1 else max(1, (cores - 1) // n))
    return Layout(servers=n, threads=t, slots=math.ceil(parallel / n), cores=cores)


class EmbeddedPool(StartedInWith):
    """Start the layout's llama-servers together, return their joined URL once all answer, stop them
    all on exit (also on error and Ctrl-C). Each runs under the watchdog (`watch_exec`), so a SIGKILLed
    runner leaves none behind. They share one log file; each line is prefixed by llama-server itself
    with nothing that tells them apart, so the log records the ports in order first."""

    label = "llama-server"

    def __init__(self, plan: Layout, *, n_ctx: int, log_path: Path | None = None,
                 startup_timeout_s: float = 180.0) -> None:
        self.layout = plan
        # The slots' prompt cache in host memory: the single server's allowance, shared out.
        cache_mib = max(64, CACHE_RAM_MIB // plan.servers)
        self.servers = [LlamaServer(n_ctx=n_ctx, parallel=plan.slots, n_threads=plan.threads, log_path=log_path,
                                    startup_timeout_s=startup_timeout_s, cache_ram_mib=cache_mib)
                        for _ in range(plan.servers)]
        self.base_url = ""

    def start(self) -> str:
        with concurrent.futures.ThreadPoolExecutor(len(self.servers)) as pool:
            started = [pool.submit(s.start) for s in self.servers]
            try:
                urls = [f.result() for f in started]
            except BaseException:
                concurrent.futures.wait(started)
                self.stop()
                raise
        self.base_url = POOL_SEP.join(urls)
        return self.base_url

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def pids(self) -> list[int]:
        return [s.proc.pid for s in self.servers if s.proc is not None]

