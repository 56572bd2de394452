"""Ctrl-C and SIGTERM while a run works.

The first one drains: no new question starts, and those in progress (at most one per worker) finish
and are saved, for up to `run.interrupt_grace_s`; then they are cancelled where they are (a slow
reply or a rate-limit wait included), unrecorded, and a resume redoes them: the grace period bounds
the whole stop. A question that does not end when cancelled (code blocking its event loop) cannot
outlast it either: `BACKSTOP_S` after the grace period the process writes status.json and exits 3.
The second one exits at once with code 130: committed pairs are safe, in-flight claims are
released on resume.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from medpanel.agents.redact import redact
from medpanel.experiments.run.store.files import write_status
from medpanel.experiments.run.tracking.state import Stop

log = logging.getLogger("medpanel.runner")
BACKSTOP_S = 5.0
"""How long after the grace period a process whose questions ignored their cancellation is ended."""


def install(stop: Stop, grace: float, backstop: Callable[[], None] | None = None,
            forward: Callable[[int, int], None] | None = None) -> Callable[[], None] | None:
    """Install the handlers; returns the function that restores the previous ones (None off the main
    thread, where Python cannot install signal handlers). `backstop` runs `BACKSTOP_S` after the
    grace period if the run has not ended by then (it records the stop and exits the process).
    `forward(signum, press)` is told of every signal first (the runner passes each to its child
    processes, `processes.py`)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    presses = {"n": 0}
    timer: list[threading.Timer] = []

    def grace_over() -> None:
        if not stop.halted:
            stop.reason = (f"{stop.reason}; questions still running after {grace:g} s were stopped "
                           "unrecorded and are redone on resume")
            stop.abort()
            log.warning("questions still running after %g s are cancelled; resume redoes them", grace)
            if backstop is not None:
                timer.append(threading.Timer(BACKSTOP_S, backstop))
                timer[-1].daemon = True
                timer[-1].start()

    def handler(signum: int, frame: object) -> None:
        presses["n"] += 1
        if forward is not None:
            forward(signum, presses["n"])
        if presses["n"] == 1:
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            stop.set(f"interrupted ({name}): finished questions are saved; resume to finish", drain=True)
            log.warning("stopping: no new questions; those in progress finish and are saved (up to %g s). "
                        "Press Ctrl-C again to abort now (they are then redone on resume)", grace)
            timer.append(threading.Timer(grace, grace_over))
            timer[-1].daemon = True
            timer[-1].start()
        else:
            os._exit(130)  # committed pairs are safe; in-flight claims are released on resume

    # A process started by one whose thread blocked these signals inherits the mask; unblocked here,
    # the kernel can hand them to the main thread, which runs the handler.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    old_int = signal.signal(signal.SIGINT, handler)
    old_term = signal.signal(signal.SIGTERM, handler)

    def restore() -> None:
        for t in timer:
            t.cancel()
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)

    return restore


def end_process(run_dir: Path, stop: Stop) -> None:
    """The grace period is over and a question ignored its cancellation: record the stop in
    status.json and end the process with code 3 (committed rows are safe; a resume releases the
    claims and redoes the rest)."""
    reason = f"{stop.reason or 'stopped'}; the process ended {BACKSTOP_S:g} s after the grace period"
    with contextlib.suppress(OSError):
        write_status(run_dir, {"state": "stopped", "reason": redact(reason),
                                               "updated": datetime.now(timezone.utc).isoformat()})
    log.warning("%s", reason)
    os._exit(3)


def in_a_thread(work: Callable[[], object]) -> None:
    """Run `work` in a thread while the main thread waits in short steps.

    Python runs signal handlers only in the main thread, between bytecodes. Blocked in Optuna's
    wait for a trial, the main thread did not wake for a Ctrl-C the kernel had delivered to another
    thread; the handler ran only when a shard finished, seconds later (seen under load). Waking every
    0.1 s makes the first Ctrl-C take effect at once."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # handed to the main thread, raised there as if run in it
            failure.append(exc)

    thread = threading.Thread(target=run, name="medpanel-study", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    if failure:
        raise failure[0]
