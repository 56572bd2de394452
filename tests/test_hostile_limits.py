"""The rate limiter never schedules a request hours away on an endpoint's word or a limit no request
fits: a request larger than the token rate is an error naming the setting; a reported usage, reset
or Retry-After is bounded before it moves the limiter. The waits are read from a clock the test
drives (every `asyncio.sleep` of the limiter advances it), so no test waits what it measures."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp import web

from medpanel.agents.model.client import ModelCallError
from medpanel.agents.model.lean_chat import SDK_HTTPX
from medpanel.agents.model.limits import RateLimits, RequestOverLimit
from medpanel.agents.model.retries import BackoffWait

from .conftest import write
from .fake_openai import schema_reply
from .hostile_server import Hostile, ask, completion, reply_json


class Clock:
    """A monotonic clock that moves only when the limiter sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _waited(limits: RateLimits, clock: Clock, tokens: int, monkeypatch: pytest.MonkeyPatch) -> float:
    """Seconds `acquire(tokens)` waited on the test's clock (its sleeps, bounded in number)."""
    sleeps: list[float] = []

    async def sleep(seconds: float, *args: Any) -> None:
        sleeps.append(seconds)
        assert len(sleeps) < 100, "the limiter kept sleeping"
        clock.now += seconds

    monkeypatch.setattr(asyncio, "sleep", sleep)
    asyncio.run(limits.acquire(tokens))
    monkeypatch.undo()
    return sum(sleeps)


def test_a_request_larger_than_the_token_rate_is_an_error_naming_the_setting() -> None:
    limits = RateLimits(tpm=100, tpm_setting="run.tokens_per_minute (--tpm)")
    with pytest.raises(RequestOverLimit, match=r"about 600 tokens .* never fit run\.tokens_per_minute \(--tpm\)"):
        asyncio.run(limits.acquire(600))
    assert limits.stats.requests == 0, "nothing was charged for it"


def test_a_reported_usage_moves_the_token_schedule_one_window_at_most(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    limits = RateLimits(tpm=6000, window_s=60.0, clock=clock)  # 100 tokens a second
    ticket = asyncio.run(limits.acquire(100))
    limits.settle(ticket, 50_000_000)  # within the usage bound, yet 8,333 s of this rate
    assert _waited(limits, clock, 100, monkeypatch) <= 60.0 + 1.0


@pytest.mark.parametrize(("headers", "what"), [
    ({"x-ratelimit-remaining-tokens": "10", "x-ratelimit-reset-tokens": "1e12"}, "a reset of 1e12 s"),
    ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "999999h"}, "a reset of 114 years"),
])
def test_an_absurd_reset_is_no_reset(headers: dict[str, str], what: str, monkeypatch: pytest.MonkeyPatch) -> None:
    told: list[float] = []
    clock = Clock()
    limits = RateLimits(clock=clock, max_wait_s=300.0, on_long_wait=told.append)
    limits.observe(200, headers)
    assert _waited(limits, clock, 500, monkeypatch) == 0.0, what
    assert told == [], "an unreadable header stops no run"


def test_a_long_reset_with_tokens_left_holds_no_longer_than_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    # 5 tokens left, reset in 2 h: the next request (500 tokens) is held, but max_wait_s at most,
    # and the runner is told (it stops the run, resumably), as for a long Retry-After.
    told: list[float] = []
    clock = Clock()
    limits = RateLimits(clock=clock, max_wait_s=5.0, on_long_wait=told.append)
    limits.observe(200, {"x-ratelimit-remaining-tokens": "5", "x-ratelimit-reset-tokens": "2h"})
    assert _waited(limits, clock, 500, monkeypatch) <= 5.0
    assert told == [7200.0]


def test_a_count_beyond_a_float_is_read_without_raising() -> None:
    limits = RateLimits()
    limits.observe(200, {"x-ratelimit-remaining-requests": "1e400", "x-ratelimit-reset-requests": "1s",
                         "x-ratelimit-remaining-tokens": "-1e400", "x-ratelimit-reset-tokens": "1s"})
    assert limits.stats.rate_limited == 0


@pytest.mark.parametrize("headers", [{"retry-after": "1e300"}, {"retry-after": "inf"},
                                     {"retry-after-ms": "1e400"}, {"retry-after": "Fri, 31 Dec 9999 23:59:59 GMT"}],
                         ids=["1e300", "inf", "ms-1e400", "year-9999"])
def test_an_absurd_retry_after_is_ignored_for_the_backoff(headers: dict[str, str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    told: list[float] = []
    clock = Clock()
    limits = RateLimits(clock=clock, max_wait_s=300.0, on_long_wait=told.append)
    limits.observe(429, headers)
    assert told == [], "an absurd figure is no reason to stop the run"
    assert _waited(limits, clock, 0, monkeypatch) <= 30.0  # the limiter's own backoff after a 429
    request = SDK_HTTPX.Request("POST", "http://127.0.0.1/v1/chat/completions")
    exc = openai.RateLimitError("slow down", response=SDK_HTTPX.Response(429, headers=headers, request=request),
                                body=None)
    assert BackoffWait().delay(exc, 1) == 0.5, "the retry waits its exponential backoff, not the header's figure"


@pytest.mark.timeout(60)
def test_an_endpoint_reporting_1e12_tokens_used_leaves_the_limiter_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    async def behave(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
        return reply_json(completion(usage={"prompt_tokens": 10**12, "completion_tokens": 5}))

    clock = Clock()
    limits = RateLimits(tpm=60_000, clock=clock)  # 1,000 tokens a second
    with Hostile(behave) as srv:
        out, _ = ask(srv.base_url, limits=limits, max_retries=0)
    assert isinstance(out, ModelCallError) and out.kind == "bad_response" and "usage.prompt_tokens" in str(out)
    # The refused reply's figure moved nothing: the next request waits for the estimate's charge only.
    assert _waited(limits, clock, 100, monkeypatch) <= 1.0


def _cli(tmp_path: Path, base_url: str, run_block: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    scenario = write(tmp_path / "s.yaml", f"""name: limits
pipeline: generalist
flags: {{c: [0]}}
dataset: {{source: sample, limit: 2}}
model: {{backend: openai, name: fake-model, base_url: "{base_url}", max_retries: 2, cache: "off"}}
run: {{{run_block}}}
""")
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "medpanel", "run", "--quiet", str(scenario), "--run-dir", str(run_dir)],
                         capture_output=True, text=True, timeout=240, env={**os.environ, "OPENAI_API_KEY": "sk-test"})
    return out, run_dir


def _count(run_dir: Path, table: str) -> int:
    with sqlite3.connect(run_dir / "study.db") as conn:
        return int(conn.execute(f"select count(*) from {table}").fetchone()[0])


async def _answer(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    return reply_json(completion(json.dumps(schema_reply(json.loads(raw)))))


@pytest.mark.timeout(300)
def test_a_run_whose_token_rate_no_request_fits_stops_naming_it(tmp_path: Path) -> None:
    with Hostile(_answer) as srv:
        out, run_dir = _cli(tmp_path, srv.base_url, "workers: 2, tokens_per_minute: 100")
        assert srv.posts == 0, "no request was sent"
    logs = out.stdout + out.stderr
    assert out.returncode == 3 and "Traceback" not in logs, logs
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped" and "never fit run.tokens_per_minute (--tpm)" in status["reason"], status
    assert _count(run_dir, "mp_results") == 0 and _count(run_dir, "mp_claims") == 0  # all redone on resume


@pytest.mark.timeout(300)
def test_a_run_whose_endpoint_asks_an_absurd_retry_after_goes_on(tmp_path: Path) -> None:
    async def behave(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
        if n % 2:
            return reply_json({"error": {"message": "later", "type": "rate_limit"}}, 429, {"retry-after": "1e300"})
        return await _answer(request, raw, n)

    with Hostile(behave) as srv:
        out, run_dir = _cli(tmp_path, srv.base_url, "workers: 1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert _count(run_dir, "mp_results where answer is not null and error is null") == 4
