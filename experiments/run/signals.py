"""Ctrl-C and SIGTERM while a run works.

The first one drains: no new question starts, and those in progress (at most one per worker) finish
and are saved, for up to `run.interrupt_grace_s`; then they are cancelled where they are (a slow
reply or a rate-limit wait included), unrecorded, and a resume redoes them: the grace period bounds
the whole stop. The second one exits at once with code 130: committed pairs
are safe, in-flight claims are released on resume.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from medpanel.experiments.run.state import Stop

log = logging.getLogger("medpanel.runner")


def install(stop: Stop, grace: float) -> Callable[[], None] | None:
    """Install the handlers; returns the function that restores the previous ones (None off the main
    thread, where Python cannot install signal handlers)."""
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

    def handler(signum: int, frame: Any) -> None:
        presses["n"] += 1
        if presses["n"] == 1:
            name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
            stop.set(f"interrupted ({name}): finished questions are saved; resume to finish", drain=True)
            log.warning("stopping: no new questions; those in progress finish and are saved (up to %g s). "
                        "Press Ctrl-C again to abort now (they are then redone on resume)", grace)
            timer.append(threading.Timer(grace, grace_over))
            timer[0].daemon = True
            timer[0].start()
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
