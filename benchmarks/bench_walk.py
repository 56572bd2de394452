"""Benchmark: the walk of the `c` flag, from where it is read to the Challenger's request; and the
walk of the `processes` setting, from where it is read to where the child processes start.

    python -m benchmarks.bench_walk [--pipeline panel generalist] [--processes] [--show]

A newcomer who follows the Challenger flag through the code opens one file after another; this
counts them on a real run instead of by hand. One scripted question runs with `c: 1` under
`sys.setprofile`, and two stretches of it are read:

- **plan time**: the call stack at the moment the pipeline reads `c` (`flag_on(flags, "c")`),
  from `experiments/run/scenario/plan.py:resolve_run` down;
- **run time**: the call stack at the moment the Challenger's request reaches the model client,
  from `agents/pipelines/run.py` down, plus every detour the code makes on its way there: the calls that
  begin after the pipeline's controlling frame (the one that asked for the previous request, the
  last turn, and now asks for the critique) got control back, and return before the request.

The model room (`agents/model/`) is where the walk ends: its first frame on the path is counted, and
what it calls inside itself is its own business (building the request, the cache, the context),
the same for every role; the scripted client that stands in for the endpoint is not counted.

Printed per pipeline: the files entered, the entries per file (a call from another file enters it;
"each file entered once" means every file has one), and the returns (detours that came back before
the request). `--show` prints the walk itself, one entry a line.

`--processes` runs `medpanel run` (in this process, a scenario with `run.processes: 3`) until its
first child would start, and prints the rooms the setting goes through: the stack where the run
block's `process_count` is read, then the stack where `children.launch` starts a child, below the
frame both share. A room entered again after the walk left it is a climb back up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import types
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from typer.testing import CliRunner

import medpanel
from medpanel.agents.model.agent import RoleAgent
from medpanel.agents.model.scripted import ScriptedChatCompletionClient
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines.run import run_resolved
from medpanel.agents.types import Condition, Question
from medpanel.experiments.cli.main import app
from medpanel.experiments.run.scenario.plan import resolve_run

ROOT = Path(medpanel.__file__).resolve().parent.parent
"""The checkout: the package's code folders (agents/, experiments/, retrieval/, methods/, medpanel/) sit here."""
CODE = ("agents/", "experiments/", "retrieval/", "methods/", "medpanel/")
SINK = "agents/model/"
ASKS = {RoleAgent.speak.__code__, RoleAgent.consult.__code__}
"""Where a role's request enters the model room."""

QUESTION = Question(dataset="walk", qid="q1", text="A 30-year-old has chest pain. Best next step?",
                    options={"A": "ECG", "B": "Discharge", "C": "MRI", "D": "Antibiotics"}, gold=("A",))
CONDITIONS = {
    "panel": Condition(slug="c1r0k0", pipeline="panel", flags={"c": 1, "r": 0, "k": 0},
                       settings={"rounds": 1, "turns_per_round": 2}),
    "generalist": Condition(slug="c1k0", pipeline="generalist", flags={"c": 1, "k": 0}),
}


def rel(frame: types.FrameType) -> str | None:
    """The frame's file relative to the checkout, when it is the project's own code."""
    try:
        path = Path(frame.f_code.co_filename).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    return path if path.startswith(CODE) and path.endswith(".py") else None


def own_caller(frame: types.FrameType) -> types.FrameType | None:
    """The nearest calling frame that is the project's own code (library frames are passed through)."""
    back = frame.f_back
    while back is not None and rel(back) is None:
        back = back.f_back
    return back


def stack(frame: types.FrameType) -> list[types.FrameType]:
    """The project's own frames from the outermost down to `frame`."""
    out = []
    f: types.FrameType | None = frame
    while f is not None:
        if rel(f) is not None:
            out.append(f)
        f = f.f_back
    return out[::-1]


@dataclass
class Event:
    kind: str  # call or return
    frame: types.FrameType
    caller: types.FrameType | None
    """The nearest calling frame of the project's own, read when the event happened (a finished frame
    forgets its caller)."""
    resumed: bool = False
    """A coroutine resumed (a call) or suspended (a return), not entered or left."""


class Recorder:
    """Every call and return of the project's own functions, until the Challenger's request."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.request: list[types.FrameType] | None = None
        """The stack of the Challenger's request, as it enters the model room."""
        self.previous: list[types.FrameType] | None = None
        """The stack of the request before it."""
        self.flag_read: list[types.FrameType] | None = None
        self._seen: set[int] = set()
        self._frames: list[types.FrameType] = []  # kept alive, so ids are never reused

    def __call__(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if self.request is not None or event not in ("call", "return"):
            return
        if event == "call" and frame.f_code in ASKS and id(frame) not in self._seen:
            # a role asks the model: the walk ends at the Challenger's request
            if frame.f_locals["self"].role == "challenger":
                self.request = stack(frame)  # recorded below, the last event
            else:
                self.previous = stack(frame)
        path = rel(frame)
        if path is None:
            return
        if (event == "call" and frame.f_code.co_name == "flag_on" and frame.f_locals.get("name") == "c"
                and self.flag_read is None):
            self.flag_read = stack(frame)
        if event == "call":
            resumed = id(frame) in self._seen
            self._seen.add(id(frame))
            self._frames.append(frame)
            self.events.append(Event("call", frame, own_caller(frame), resumed))
        else:
            self.events.append(Event("return", frame, own_caller(frame)))


def mark_suspensions(events: list[Event]) -> None:
    """A coroutine's `return` followed later by a call of the same frame was a suspension."""
    resumed_at: dict[int, int] = {}
    for i, e in enumerate(events):
        if e.kind == "call" and e.resumed:
            resumed_at[id(e.frame)] = i
    for i, e in enumerate(events):
        if e.kind == "return" and resumed_at.get(id(e.frame), -1) > i:
            e.resumed = True


@dataclass
class Walk:
    files: list[str]
    entries: Counter[str]
    returns: int
    lines: list[str]


def hidden(e: Event) -> bool:
    """Inside the model room: below the walk's last step."""
    return e.caller is not None and (rel(e.caller) or "").startswith(SINK)


def walk_of(rec: Recorder) -> tuple[Walk, Walk]:
    assert rec.request is not None and rec.previous is not None and rec.flag_read is not None
    mark_suspensions(rec.events)
    plan = path_walk(rec.flag_read, "plan")
    target, before = rec.request, rec.previous
    # the controlling frame: the deepest frame on both paths (it asked for both requests)
    common = 0
    while common < min(len(target), len(before)) and target[common] is before[common]:
        common += 1
    control = target[common - 1]
    child = before[common]  # the call (a turn) that led to the previous request
    start = max(i for i, e in enumerate(rec.events) if e.kind == "return" and e.frame is child and not e.resumed)
    run = path_walk(target[:common], "run")
    on_path = {id(f) for f in target}
    depth_of: dict[int, int] = {}
    for e in rec.events[start + 1:]:
        if e.resumed or hidden(e):
            continue
        f = e.frame
        if e.kind == "call":
            caller = e.caller
            depth = depth_of.get(id(caller), 0) + 1 if caller is not None and caller is not control else 1
            depth_of[id(f)] = depth
            here, there = rel(f) or "", rel(caller) if caller is not None else None
            entered = here != there
            if entered:
                run.entries[here] += 1
                if here not in run.files:
                    run.files.append(here)
            mark = "->" if entered else "  "
            run.lines.append(f"run  {'  ' * depth}{mark} {here}:{f.f_code.co_name}"
                             + ("" if id(f) not in on_path else "   (on the path to the request)"))
            if rel(f) and (rel(f) or "").startswith(SINK) and id(f) in on_path:
                break
        elif id(f) not in on_path:
            run.returns += 1
    return plan, run


def path_walk(frames: list[types.FrameType], label: str) -> Walk:
    walk = Walk([], Counter(), 0, [])
    last = None
    for depth, f in enumerate(frames):
        here = rel(f) or ""
        if here != last:
            walk.entries[here] += 1
            if here not in walk.files:
                walk.files.append(here)
        walk.lines.append(f"{label} {'  ' * depth}{'->' if here != last else '  '} {here}:{f.f_code.co_name}")
        last = here
        if here.startswith(SINK):
            break
    return walk


def measure(name: str) -> tuple[Walk, Walk]:
    condition = CONDITIONS[name]
    rec = Recorder()
    sys.setprofile(rec)
    try:
        resolved = resolve_run(condition.pipeline, condition.settings, [condition]).condition(condition.slug)
        client = ScriptedChatCompletionClient()
        asyncio.run(run_resolved(resolved, QUESTION, ModelSpec(backend="scripted", cache="off"),
                                 client_factory=lambda s: client))
    finally:
        sys.setprofile(None)
    return walk_of(rec)


class _Started(Exception):
    """The first child process would start here: the walk is complete."""


def room_of(path: str) -> str:
    """The room of a checkout file, as tests/test_architecture.py counts them."""
    parts = Path(path).parent.parts
    return "/".join(parts[:3] if "/".join(parts[:2]) == "experiments/run" else parts[:2])


def measure_processes() -> tuple[list[str], list[str]]:
    """The files and rooms from where `processes` is read to where the first child starts."""
    seen: dict[str, list[types.FrameType]] = {}

    def profile(frame: types.FrameType, event: str, arg: Any) -> None:
        if event != "call" or rel(frame) is None:
            return
        name = frame.f_code.co_name
        if name == "process_count" and "read" not in seen:
            seen["read"] = stack(frame)
        elif name == "launch" and (rel(frame) or "").endswith("execution/children.py") and "start" not in seen:
            seen["start"] = stack(frame)

    def popen(*args: Any, **kwargs: Any) -> Any:
        raise _Started

    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "walk.yaml"
        scenario.write_text("name: walk\npipeline: generalist\nflags: {c: [0]}\ndataset: {source: sample, limit: 1}\n"
                            "model: {backend: scripted}\nrun: {processes: 3, workers: 1}\n", encoding="utf-8")
        # No child really starts; prestart starts at most one fewer than the cores: at least one here.
        with mock.patch.object(subprocess, "Popen", popen), mock.patch.object(os, "cpu_count", lambda: 4):
            sys.setprofile(profile)
            try:
                CliRunner().invoke(app, ["run", str(scenario), "--run-dir", str(Path(tmp) / "run")])
            finally:
                sys.setprofile(None)
    read, start = seen["read"], seen["start"]
    common = 0
    while common < min(len(read), len(start)) and read[common] is start[common]:
        common += 1
    files = list(dict.fromkeys(rel(f) or "" for f in [*read, *start[common:]]))
    rooms: list[str] = []
    for f in [*read, *start[common:]]:
        room = room_of(rel(f) or "")
        if not rooms or rooms[-1] != room:
            rooms.append(room)
    return files, rooms


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipeline", nargs="+", default=["panel", "generalist"], choices=sorted(CONDITIONS))
    ap.add_argument("--show", action="store_true", help="print the walk, one entry a line")
    ap.add_argument("--processes", action="store_true", help="the walk of `run.processes` instead")
    args = ap.parse_args(argv)
    if args.processes:
        files, rooms = measure_processes()
        climbs = [r for i, r in enumerate(rooms) if r in rooms[:i]]
        print(f"processes: {len(files)} files, {len(set(rooms))} rooms, climbs back up: {', '.join(climbs) or 'none'}")
        print("  rooms: " + " -> ".join(rooms))
        print("  files: " + " -> ".join(files))
        return
    for name in args.pipeline:
        plan, run = measure(name)
        files = list(dict.fromkeys([*plan.files, *run.files]))
        again = [f"{f} x{n}" for walk in (plan, run) for f, n in walk.entries.items() if n > 1]
        print(f"{name}: {len(files)} files ({len(plan.files)} at plan time, {len(run.files)} at run time), "
              f"{run.returns} returns; entered more than once: {', '.join(again) or 'none'}")
        for label, walk in (("plan", plan), ("run", run)):
            print(f"  {label}: " + " -> ".join(f"{f}" + (f" x{walk.entries[f]}" if walk.entries[f] > 1 else "")
                                               for f in walk.files))
        if args.show:
            print("\n".join([*plan.lines, *run.lines]))

if __name__ == "__main__":
    main()
