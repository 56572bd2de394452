"""The run's progress bar: pairs done, accuracy, calls/s, tokens/min against the limit, and an ETA.

Rates are this session's, over the last `window_s` seconds (a resumed run's earlier sessions do not
inflate them); the ETA divides the pairs left by the pairs finished per second this session. The
clock is injectable so the rendering is tested without waiting.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from medpanel.experiments.run.tracking.state import Tally

WINDOW_S = 60.0


class Throughput:
    """Calls/s and tokens/min over a sliding window of the tally's running totals."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, window_s: float = WINDOW_S) -> None:
        self.clock = clock
        self.window_s = window_s
        self._samples: deque[tuple[float, int, int]] = deque()
        self._first: tuple[float, int] | None = None
        """(time, pairs done) when this session started: the ETA's baseline."""
        self._lock = threading.Lock()

    def update(self, done: int, calls: int, tokens: int) -> None:
        now = self.clock()
        with self._lock:
            if self._first is None:
                self._first = (now, done)
            self._samples.append((now, calls, tokens))
            # Keep one sample older than the window, so the window's rate has a start.
            while len(self._samples) > 2 and self._samples[1][0] <= now - self.window_s:
                self._samples.popleft()
            self._done = done

    def rates(self) -> tuple[float, float]:
        """(calls per second, tokens per minute) over the window; 0 before two samples."""
        with self._lock:
            if len(self._samples) < 2:
                return 0.0, 0.0
            (t0, c0, k0), (t1, c1, k1) = self._samples[0], self._samples[-1]
        span = t1 - t0
        if span <= 0:
            return 0.0, 0.0
        return (c1 - c0) / span, (k1 - k0) / span * 60

    def eta_s(self, total: int) -> float | None:
        """Seconds to finish at this session's pace; None before a pair has finished."""
        with self._lock:
            if self._first is None:
                return None
            t0, d0 = self._first
            done = self._done
        elapsed, finished = self.clock() - t0, done - d0
        if finished <= 0 or elapsed <= 0:
            return None
        return max(0, total - done) / (finished / elapsed)


def _clock_text(seconds: float | None) -> str:
    if seconds is None:
        return "-:--:--"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def speed_text(meter: Throughput, total: int, tpm_limit: float | None) -> str:
    calls_s, tpm = meter.rates()
    limit = f"/ {tpm_limit:,.0f}" if tpm_limit else "(no limit)"
    return f"{calls_s:.1f} calls/s  {tpm:,.0f} tok/min {limit}  ETA {_clock_text(meter.eta_s(total))}"


def make_progress(console: Console, *, quiet: bool) -> Progress:
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("acc {task.fields[acc]}  invalid {task.fields[invalid]}  errors {task.fields[errors]}  "
                          "calls {task.fields[calls]} (+{task.fields[hits]} cached)  tokens {task.fields[tokens]}"
                          "{task.fields[cost]}"),
               TextColumn("{task.fields[speed]}"), TimeElapsedColumn()]
    return Progress(*columns, console=console, disable=quiet, transient=False)


def progress_hook(progress: Progress, total: int, *, priced: bool, tpm_limit: float | None,
                  clock: Callable[[], float] = time.monotonic) -> Callable[[Tally, int], None]:
    """Add the run's task to `progress`; the returned hook updates it from the tally (any thread)."""
    meter = Throughput(clock)
    task = progress.add_task("questions", total=total, acc="-", invalid=0, errors=0, calls=0, hits=0, tokens=0,
                             cost="", speed="")

    def hook(t: Tally, _total: int) -> None:
        meter.update(t.done, t.calls, t.tokens)
        fields: dict[str, Any] = dict(acc=f"{100 * t.correct / max(t.done, 1):.1f}%", invalid=t.invalid,
                                      errors=t.errors, calls=t.calls, hits=t.cache_hits, tokens=t.tokens,
                                      cost=f"  ${t.cost_usd:.4f}" if priced else "",
                                      speed=speed_text(meter, total, tpm_limit))
        progress.update(task, completed=t.done, **fields)

    return hook
