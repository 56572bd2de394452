"""The cyclic garbage collector while a session's workers run (`collecting_less`)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

GC_YOUNG_THRESHOLD = 10_000
"""Allocations between the collector's youngest-generation passes while a session works (Python's
default is 700); see `collecting_less`."""


@contextlib.contextmanager
def collecting_less() -> Iterator[None]:
    """While the workers run: what the process holds already is frozen out of the cyclic garbage
    collector's passes, and its youngest generation is collected 14 times less often.

    Every full pass walked every object of the imports (AutoGen, pydantic's schemas, the SDKs,
    Optuna, SQLAlchemy: about 190 ms a pass here), and at 700 allocations a young pass met the
    dozens of questions in flight alive and promoted them, which brought full passes sooner: the
    collector took about 0.37 ms of CPU a model call (`benchmarks/bench_lean.py`). A question's
    objects mostly die once it is committed, so fewer young passes find fewer survivors. Both are
    undone when the session ends (a notebook's process goes on with its own settings)."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(threshold[0], GC_YOUNG_THRESHOLD), *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
