"""Execution: what one worker does with its shard (what a session's workers share is `shared.py`).

Each pair is claimed in the store before any model call and committed (transcript, then row) after,
so no pair runs twice whatever Optuna's sampler re-offers. A worker whose shard is done helps with
pairs nobody has claimed, from the far end of the grid, so large shards never leave workers idle at
the end of a run. On SQLite a claim and a commit run on the loop's own connection unless another
connection holds the write lock (`Store.claim_now`, `Store.record_now`), and a lane's next pair is
claimed in the transaction that records its last one (`Store.record_and_claim_now`); a commit that met it, and
every PostgreSQL commit, runs in a thread while the lane claims and starts the next question: at
most one commit per lane is in flight, awaited before the next is queued and before the worker
returns; a failed commit releases its pair and raises.

Width: a worker keeps `run.questions_per_worker` questions in flight on its one event loop (lanes
that draw from one iterator of pairs), so hundreds of questions wait on the network without a
thread each (`benchmarks/bench_perf.py --width` measured both designs; see docs/operations.md). A lane
that fails stops its siblings from starting new questions; what they have in flight finishes and
is committed, then the first failure is raised.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import itertools
import math
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

from medpanel.agents.model.client import RunHalted
from medpanel.agents.pipelines.run import ClientPool, Route, run_resolved
from medpanel.agents.types import Question, QuestionResult
from medpanel.experiments.run.execution.shared import Shared as Shared  # re-exported: its home was here
from medpanel.experiments.run.store.storage import Pair
from medpanel.experiments.run.store.store import Row
from medpanel.experiments.run.tracking.budget import cache_saving, event_cost
from medpanel.experiments.run.tracking.health import Held

LANES_PER_CLIENT = 8
THREADS_PER_WORKER = 8
ABORT_POLL_S = 0.1
"""How often a worker's loop looks at the abort flag (set from a signal handler's timer thread)."""


@dataclass
class _Commit:
    """A question's commit running in a thread, and whether the tally has counted it yet."""

    future: asyncio.Future[Row]
    pair: Pair
    result: QuestionResult
    counted: bool = False
    hook_error: BaseException | None = None
    """An exception from counting it in the done-callback (a progress hook), raised at `settle`."""


class Worker:
    """One worker thread's event loop over its shard, then over the pairs nobody has claimed, with
    `run.questions_per_worker` lanes (questions in flight) on that loop."""

    def __init__(self, shared: Shared) -> None:
        self.shared = shared
        self.committed = 0
        self.correct = 0
        self.failed = False
        """A lane raised: the others start no new question."""
        self.questions: set[asyncio.Task[QuestionResult]] = set()
        """The questions in flight on this loop, cancelled when the run aborts."""

    async def _watch_abort(self) -> None:
        # A threading.Event set from a timer thread: no asyncio.Event can be awaited for it.
        while not self.shared.stop.aborted:  # noqa: ASYNC110
            await asyncio.sleep(ABORT_POLL_S)
        for task in list(self.questions):
            task.cancel()

    async def unless_aborted(self, question: Any) -> QuestionResult:
        """Run one question, cancelled (as `RunHalted`: unrecorded, redone on resume) if the run aborts."""
        task: asyncio.Task[QuestionResult] = asyncio.ensure_future(question)
        self.questions.add(task)
        if self.shared.stop.aborted:
            task.cancel()
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.shared.stop.aborted and (current is None or not current.cancelling()):
                raise RunHalted(self.shared.stop.reason or "run aborted") from None
            raise
        finally:
            self.questions.discard(task)

    async def work(self, shard: list[Pair]) -> tuple[int, int]:
        """(pairs committed, of them correct)."""
        s = self.shared
        n = s.plan.scenario.run.questions_per_worker
        # One HTTP client per LANES_PER_CLIENT lanes: httpx's pool checks every connection it holds
        # on each request, so one client for all of a loop's lanes costs O(width) per call.
        pools = [ClientPool() for _ in range(math.ceil(n / LANES_PER_CLIENT))]
        # Own shard first, then help: the other shards' pairs from the far end, where their own
        # workers will arrive last. One iterator for every lane: next() runs on the loop's thread.
        pairs = itertools.chain(shard, reversed(s.pending))
        lanes = [_Lane(self) for _ in range(n)]
        if n > 1:
            # Claims and commits run in the loop's default executor, one store connection each:
            # bounded, so a process holds at most THREADS_PER_WORKER connections per worker
            # (PostgreSQL's pool and max_connections; see docs/operations.md).
            asyncio.get_running_loop().set_default_executor(
                concurrent.futures.ThreadPoolExecutor(THREADS_PER_WORKER, thread_name_prefix="medpanel-store"))
        watch = asyncio.ensure_future(self._watch_abort())
        try:
            outcomes = await asyncio.gather(*(lane.run(pairs, pools[i // LANES_PER_CLIENT])
                                              for i, lane in enumerate(lanes)), return_exceptions=True)
        finally:
            watch.cancel()
            for pool in pools:
                await pool.close()
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return self.committed, self.correct


class _Lane:
    """One question at a time of a worker's event loop: claim, run, commit in a thread."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.shared = worker.shared
        self.in_flight: _Commit | None = None

    async def run(self, pairs: Iterator[Pair], clients: ClientPool) -> None:
        try:
            try:
                await self._pairs(pairs, clients)
            finally:
                await self._settle()
        except BaseException:
            self.worker.failed = True
            raise

    def _count(self, commit: _Commit) -> None:
        """Tally a finished commit once: from its done-callback (live progress) or from `_settle`."""
        if commit.counted or not commit.future.done() or commit.future.cancelled():
            return
        if commit.future.exception() is not None:
            return  # raised where the commit is awaited
        commit.counted = True
        self._tally(commit.future.result(), commit.result)

    def _tally(self, row: Row, result: QuestionResult) -> None:
        self.worker.committed += 1
        self.worker.correct += row.correct
        self.shared.count(row, result)

    def _count_landed(self, commit: _Commit, _future: object) -> None:
        # A done-callback's exception would only be logged by the event loop: keep it for _settle.
        try:
            self._count(commit)
        except BaseException as exc:
            commit.hook_error = exc

    async def _settle(self) -> None:
        if self.in_flight is None:
            return
        commit, self.in_flight = self.in_flight, None
        try:
            await commit.future
        except BaseException:
            self.shared.release_quietly(commit.pair)
            raise
        self._count(commit)
        if commit.hook_error is not None:
            raise commit.hook_error

    async def _commit_held(self) -> None:
        """Failures held back while the endpoint looked dead: it has answered since, so they are rows."""
        s = self.shared
        for held in s.health.take_committable():
            try:
                row = await asyncio.to_thread(s.commit, held)
            except BaseException:
                s.release_quietly(held.pair)
                raise
            s.count(row, held.result)

    async def _claim(self, pair: Pair) -> bool:
        s = self.shared
        if not s.store.shared:
            # SQLite: on this thread, unless another connection is writing (see `Store._now`).
            taken = s.store.claim_now(pair, s.owner, retry_errors=s.retry_errors)
            if taken is not None:
                return taken
        if s.plan.scenario.run.questions_per_worker == 1:
            return s.store.claim(pair, s.owner, retry_errors=s.retry_errors)  # nothing else on this loop
        try:
            return await asyncio.to_thread(s.store.claim, pair, s.owner, retry_errors=s.retry_errors)
        except BaseException:
            # Cancelled while the thread may have claimed: release, so a resume does not wait on it.
            s.release_quietly(pair)
            raise

    async def _next(self, pairs: Iterator[Pair]) -> Pair | None:
        """The next pair this lane takes (this process's from now on, not claimed yet), or None when
        the lane stops: nothing left, a stop (a budget, `max_errors`) or a sibling's failure."""
        s = self.shared
        for pair in pairs:
            await self._commit_held()
            s.budget.check()
            if s.stop.is_set or self.worker.failed:
                return None
            if s.take(pair):
                return pair
        return None

    async def _pairs(self, pairs: Iterator[Pair], clients: ClientPool) -> None:
        s = self.shared
        scenario = s.plan.scenario
        resolved = s.plan.resolved
        questions = s.plan.question_index
        pair = await self._next(pairs)
        claimed = False  # `pair` was claimed in the last question's row's transaction (SQLite)
        while pair is not None:
            if claimed:
                claimed = False
                if s.stop.is_set or self.worker.failed:  # set by counting the row just recorded
                    s.release_quietly(pair)
                    break
            # In a thread: a claim waits for SQLite's one writer, and on the loop's thread that wait
            # would stall every other question in flight on it.
            elif not await self._claim(pair):
                pair = await self._next(pairs)
                continue  # finished already, or another process holds it
            s.timings.setdefault("first_question_s", time.time() - s.started)
            condition = resolved.condition(pair[0])
            question = questions[(pair[1], pair[2])]
            try:
                # budget_match: this question's budget goes into the condition's settings, or an error row.
                matched = s.plan.budget.apply(condition, question, pair[3]) if s.plan.budget else condition
                if isinstance(matched, QuestionResult):
                    result = matched
                else:
                    ax = s.plan.axes
                    label, spec = ax.model_for(pair[0])
                    routes = {role: Route(to, ax.models[to], **s.model_call(to, ax.models[to]))
                              for role, to in ax.routes.items()}
                    run = run_resolved(matched, question, spec, **s.model_call(label, spec),
                                       cache=s.cache, repeat=pair[3], scoring=scenario.dataset.scoring,
                                       client_factory=s.client_factory,
                                       hooks=[s.budget.on_event, s.health.on_event,
                                              *(b.on_event for b in s.model_budgets.values())],
                                       clients=clients, label=label, routes=routes,
                                       prompts=ax.cond_prompts.get(pair[0]), limits=s.budget.limiter,
                                       replay=s.replay)
                    result = await self.worker.unless_aborted(run)
                cost = sum(event_cost(e, s.budget.prices) for e in result.events)
                await self._settle()
            except RunHalted:
                s.release_quietly(pair)  # unfinished: resume runs it again
                break
            except BaseException:
                s.release_quietly(pair)
                raise
            held_back, cause = s.health.hold(Held(pair, result, question, cost))
            if held_back:
                # Maybe a dead endpoint or a wrong key: not recorded until a call is answered.
                if cause is not None:
                    s.stop.set(cause)
                pair = await self._next(pairs)
                continue
            pair, claimed = await self._record(pair, result, question, cost, pairs)

    async def _record(self, pair: Pair, result: QuestionResult, question: Question, cost: float,
                      pairs: Iterator[Pair]) -> tuple[Pair | None, bool]:
        """Commit a finished pair and find the lane's next: (that pair or None, whether it was
        claimed in the row's own transaction)."""
        s = self.shared
        saved = sum(cache_saving(e, s.budget.prices) for e in result.events)
        if s.store.shared:
            # PostgreSQL: each statement is a round trip to the server, in a thread while this lane goes on.
            self._queue(asyncio.to_thread(s.store.commit, result, question, s.owner, cost_usd=cost,
                                          replace_error=pair in s.error_pairs, cache_saved_usd=saved), pair, result)
            return await self._next(pairs), False
        try:
            staged = s.store.stage(result, question, s.owner, cost_usd=cost, replace_error=pair in s.error_pairs,
                                   cache_saved_usd=saved)
            # SQLite: the next pair is claimed in the row's own transaction (`Store.record_and_claim_now`).
            then = await self._next(pairs)
            if then is not None:
                done = s.store.record_and_claim_now(staged, then, s.owner, retry_errors=s.retry_errors)
            else:
                row = s.store.record_now(staged)
                done = None if row is None else (row, False)
        except BaseException:
            s.release_quietly(pair)
            raise
        if done is None:
            # Another connection is writing (another worker or process): wait for it in a thread;
            # the next pair is claimed on its own.
            self._queue(asyncio.to_thread(s.store.record, staged), pair, result)
            return then, False
        row, claimed = done
        try:
            self._tally(row, result)
        except BaseException:
            if then is not None and claimed:
                s.release_quietly(then)
            raise
        if then is not None and not claimed:
            return await self._next(pairs), False  # finished already, or another process holds it
        return then, claimed

    def _queue(self, commit: Coroutine[object, object, Row], pair: Pair, result: QuestionResult) -> None:
        """A commit to finish in a thread while this lane goes on (`_settle` awaits it)."""
        self.in_flight = _Commit(asyncio.ensure_future(commit), pair, result)
        self.in_flight.future.add_done_callback(functools.partial(self._count_landed, self.in_flight))
