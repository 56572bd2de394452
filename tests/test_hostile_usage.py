"""An endpoint's usage figures are checked before anything counts or stores them: a negative,
fractional, non-numeric or absurd (1e20) figure is a bad reply, retried, then an error; never
stored, never an overflow of SQLite. Real local HTTP servers, the real clients, `medpanel run`."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from medpanel.agents.model.cache import ResponseCache, cache_key
from medpanel.agents.model.client import ModelCallError, QuestionSession, RecordingClient, to_openai
from medpanel.agents.model.spec import ModelSpec
from medpanel.experiments.run.store.transcript_log import documents

from .conftest import write
from .fake_openai import schema_reply
from .hostile_server import Hostile, ask, completion, reply_json

BACKENDS = ["openai", "azure"]  # aiohttp's LeanChatClient; the openai SDK's httpx (PostedChat)

BAD_USAGE: dict[str, tuple[Any, str]] = {
    "negative": ({"prompt_tokens": -5, "completion_tokens": 3}, "usage.prompt_tokens"),
    "fractional": ({"prompt_tokens": 5.5, "completion_tokens": 3}, "usage.prompt_tokens"),
    "absurd": ({"prompt_tokens": 10**20, "completion_tokens": 3}, "usage.prompt_tokens"),
    "a string": ({"prompt_tokens": 12, "completion_tokens": "7"}, "usage.completion_tokens"),
    "a list": ({"prompt_tokens": 12, "completion_tokens": [7]}, "usage.completion_tokens"),
    "absurd cached": ({"prompt_tokens": 12, "completion_tokens": 3,
                       "prompt_tokens_details": {"cached_tokens": 10**20}}, "cached_tokens"),
    "negative cached": ({"prompt_tokens": 12, "completion_tokens": 3,
                         "prompt_tokens_details": {"cached_tokens": -1}}, "cached_tokens"),
    "not an object": ("plenty", "usage"),
}


def _constant(body: dict[str, Any]) -> Any:
    async def behave(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
        return reply_json(body)
    return behave


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(BAD_USAGE))
def test_bad_usage_is_a_retried_bad_reply_never_recorded(case: str, backend: str) -> None:
    usage, field = BAD_USAGE[case]
    with Hostile(_constant(completion(usage=usage))) as srv:
        out, events = ask(srv.base_url, backend)
        assert srv.posts == 2, "a bad reply is retried (max_retries 1)"
    assert isinstance(out, ModelCallError) and out.kind == "bad_response", out
    assert field in str(out), out
    (event,) = events
    assert event.attempts == 2 and event.error.startswith("bad_response") and field in event.error
    assert (event.usage.prompt_tokens, event.usage.completion_tokens, event.usage.cached_tokens) == (0, 0, 0)


@pytest.mark.timeout(60)
def test_a_cached_reply_with_an_absurd_usage_is_asked_again(tmp_path: Path) -> None:
    """A cache written before usage was checked may hold an endpoint's 1e20: it answers nothing."""
    from autogen_core.models import UserMessage

    cache = ResponseCache(tmp_path / "cache")
    with Hostile(_constant(completion("fresh", usage={"prompt_tokens": 21, "completion_tokens": 4}))) as srv:
        # The very request `ask` makes, keyed as the cache keys it.
        spec = ModelSpec(backend="openai", name="fake-model", base_url=srv.base_url, max_retries=1, cache="run",
                         max_tokens=33)
        request = RecordingClient(QuestionSession(spec=spec, inner=None))._request(  # type: ignore[arg-type]
            [to_openai(UserMessage(content="Which one?", source="u"))])
        cache.put(cache_key(request), {"content": "stale", "prompt_tokens": 10**20, "completion_tokens": 3,
                                       "cached_tokens": 0})
        out, events = ask(srv.base_url, cache=cache)
        assert srv.posts == 1, "the stale entry answered the call"
    assert out.content == "fresh"
    (event,) = events
    assert not event.cache_hit and (event.usage.prompt_tokens, event.usage.completion_tokens) == (21, 4)


def _run(tmp_path: Path, base_url: str, run_block: str = "workers: 1") -> tuple[subprocess.CompletedProcess[str], Path]:
    scenario = write(tmp_path / "s.yaml", f"""name: usage
pipeline: generalist
flags: {{c: [0]}}
dataset: {{source: sample, limit: 2}}
model: {{backend: openai, name: fake-model, base_url: "{base_url}", max_retries: 1, cache: "off"}}
run: {{{run_block}}}
""")
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "medpanel", "run", "--quiet", str(scenario), "--run-dir", str(run_dir)],
                         capture_output=True, text=True, timeout=240, env={**os.environ, "OPENAI_API_KEY": "sk-test"})
    return out, run_dir


def _rows(run_dir: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(run_dir / "study.db") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return list(conn.execute("select qid, error_kind, error, tokens, answer from mp_results order by qid"))


@pytest.mark.timeout(300)
def test_a_run_against_an_endpoint_reporting_1e20_tokens_records_error_rows(tmp_path: Path) -> None:
    async def behave(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
        reply = json.dumps(schema_reply(json.loads(raw)))
        return reply_json(completion(reply, usage={"prompt_tokens": 10**20, "completion_tokens": 3}))

    with Hostile(behave) as srv:
        out, run_dir = _run(tmp_path, srv.base_url)
    logs = out.stdout + out.stderr
    assert out.returncode == 0 and "Traceback" not in logs, logs
    rows = _rows(run_dir)
    assert len(rows) == 4 and {r[1] for r in rows} == {"bad_response"}, rows
    assert all("usage.prompt_tokens" in r[2] and r[3] == 0 for r in rows), rows
    assert "4 of 4 pairs are error rows" in out.stdout


@pytest.mark.timeout(300)
def test_a_retry_that_reports_sane_usage_is_stored_with_its_own_figures(tmp_path: Path) -> None:
    async def behave(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
        reply = json.dumps(schema_reply(json.loads(raw)))
        usage = {"prompt_tokens": -(10**20) if n % 2 else 30, "completion_tokens": 7}
        return reply_json(completion(reply, usage=usage))

    with Hostile(behave) as srv:
        out, run_dir = _run(tmp_path, srv.base_url)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = _rows(run_dir)
    assert len(rows) == 4 and all(r[1] is None and r[4] for r in rows), rows
    assert {r[3] for r in rows} == {37}, "each row counts the answered attempt's usage, nothing of the refused one"
    docs = [json.loads(raw) for raw in documents(run_dir)]
    calls = [e for d in docs for e in d["events"] if e["kind"] == "call"]
    assert len(calls) == 4 and all(e["attempts"] == 2 and e["usage"]["prompt_tokens"] == 30 for e in calls)
