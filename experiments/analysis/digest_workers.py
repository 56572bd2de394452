"""A run's row digests read in several processes (`read_digests_spread`), and the bytes a worker
hands its chunk's digests back in.

Pickling a full-protocol run's digests costs about as much as decoding half its transcripts (each
frozen, slotted dataclass is pickled and rebuilt through Python-level state functions, and each
copy of a string travels again), which the parent, alone, would pay for every worker. Here each
digest becomes a tuple of plain values that `marshal` writes in C: the row is left out (the parent
has it, and puts its own back), the strings a run repeats (conditions, agents, roles, steps, stage
labels, cell states) are written once per chunk and read back as one object, and the parent rebuilds
the digests with the classes' own constructors, one cell object per distinct (position, status).
Equal digests, so equal tables, at a fifth of pickle's cost and in less memory.

A digest holding a value `marshal` cannot write (none today: a transcript is JSON) is pickled instead.
"""

from __future__ import annotations

import dataclasses
import gc
import marshal
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from medpanel.experiments.analysis.digest import Decision, Passage, RowDigest, Ruling, gc_paused, read_digest
from medpanel.experiments.analysis.fanout import Done, chunk_bounds, fan_out
from medpanel.experiments.analysis.inference.ledger import CallCost
from medpanel.experiments.analysis.trajectory_types import Cell, Intervention, Outcome, Stage, Trajectory
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import transcript_paths

_MARSHAL, _PICKLE = b"m", b"p"


def read_digests_spread(run_dir: Path, rows: Sequence[Row], *, scoring: str, processes: int,
                        meanwhile: Callable[[], None] | None = None) -> list[RowDigest]:
    """Each row's digest, in row order, the rows' contiguous chunks read in `processes` processes
    (`fanout.fan_out`; 1: `digest.read_digests` in this one), with the collector paused as there.
    `meanwhile` runs in this process while the workers read (with the collector on: the digests are
    not there yet). The first damaged transcript in row order is its one-line `UserError`, as in one
    process; a missing one is a `missing` digest."""
    path_of = transcript_paths(run_dir)

    def work(bounds: tuple[int, int]) -> Done[list[RowDigest]]:
        return Done([read_digest(path_of(row) if row.transcript else None, row, scoring=scoring)
                     for row in rows[bounds[0]:bounds[1]]])

    with gc_paused():
        chunks = fan_out(chunk_bounds(len(rows), processes), work, processes, encode=encode,
                         decode=lambda bounds, data: decode(rows[bounds[0]:bounds[1]], data),
                         meanwhile=collecting(meanwhile) if meanwhile is not None else None)
    return [d for chunk in chunks for d in chunk]


def collecting(fn: Callable[[], None]) -> Callable[[], None]:
    """`fn` run with the cycle collector on, in a pass that pauses it: the work done meanwhile (the
    tables of the rows, the figures) makes what the collector is for, and the digests it would
    walk are not there yet."""
    def run() -> None:
        gc.enable()
        try:
            fn()
        finally:
            gc.disable()
    return run


def encode(digests: Sequence[RowDigest]) -> bytes:
    """A chunk's digests (rows left out) as bytes."""
    memo: dict[Any, Any] = {}
    s = memo.setdefault
    flat = [_digest(d, s) for d in digests]
    try:
        return _MARSHAL + marshal.dumps(flat, 4)
    except ValueError:  # a value marshal cannot write: the digests as they are
        return _PICKLE + pickle.dumps(list(digests), protocol=5)


def decode(rows: Sequence[Row], data: bytes) -> list[RowDigest]:
    """The digests `encode` wrote, each given back its row (`rows`: the chunk's, in order)."""
    if data[:1] == _PICKLE:
        return [dataclasses.replace(d, row=row) for row, d in zip(rows, pickle.loads(data[1:]), strict=True)]
    cells: dict[tuple[str | None, str], Cell] = {}
    return [_rebuild(row, f, cells) for row, f in zip(rows, marshal.loads(data[1:]), strict=True)]


def _digest(d: RowDigest, s: Any) -> tuple[object, ...]:
    o, t = d.outcome, d.trajectory
    outcome = (s(o.condition, o.condition), s(o.dataset, o.dataset), o.qid, o.repeat, o.answer, o.gold, o.correct,
               o.invalid, o.error, o.scored)
    stages = tuple((s(st.label, st.label),
                    tuple((s(name, name), s((c.position, c.status), (c.position, c.status)))
                          for name, c in st.cells.items()),
                    s(st.majority, st.majority), s(st.state, st.state),
                    tuple((s(i.kind, i.kind), i.detail, i.event_index, i.to, i.group) for i in st.before),
                    st.event_index, st.joined) for st in t.stages)
    trajectory = (t.condition, t.dataset, t.qid, t.repeat, t.gold, s(t.kind, t.kind), stages, t.scored, t.error)
    calls = tuple((s(c.role, c.role), s(c.step, c.step), s(c.model, c.model), c.prompt_tokens, c.completion_tokens,
                   c.cache_hit, c.attempts, c.failed, c.batch) for c in d.calls)
    passages = tuple((p.event, s(p.role, p.role), s(p.step, p.step), p.key, p.index, p.item)
                     for p in d.passages)
    dec = d.decision
    decision = None if dec is None else (tuple(dec.candidates.items()), _ruling(dec.guard), _ruling(dec.audit))
    return (d.missing, outcome, trajectory, calls, passages, d.question, decision, d.mcq)


def _ruling(r: Ruling) -> tuple[object, ...]:
    return (r.outcome, r.default, r.challenger)


def _rebuild(row: Row, f: Any, cells: dict[tuple[str | None, str], Cell]) -> RowDigest:
    missing, o, t, calls, passages, question, decision, mcq = f
    stages = []
    for label, st_cells, majority, state, before, event_index, joined in t[6]:
        here = {}
        for name, key in st_cells:
            cell = cells.get(key)
            if cell is None:
                cell = cells[key] = Cell(*key)
            here[name] = cell
        stages.append(Stage(label, here, majority, state, [Intervention(*i) for i in before], event_index, joined))
    trajectory = Trajectory(t[0], t[1], t[2], t[3], t[4], t[5], stages, t[7], t[8])
    return RowDigest(
        row=row, missing=missing, outcome=Outcome(*o), trajectory=trajectory,
        calls=tuple([CallCost(*c) for c in calls]),
        passages=tuple([Passage(*p) for p in passages]), question=question,
        decision=None if decision is None else Decision(dict(decision[0]), Ruling(*decision[1]), Ruling(*decision[2])),
        mcq=mcq)
