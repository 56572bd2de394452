"""No HTTP client of medpanel follows a redirect: a 307 would resend the request, prompts and all, to
wherever it points (the clients strip the key, not the body). The redirect is an error naming where
it pointed and the setting to fix, never retried; a run that meets it on every call stops with one
line. The other origin is a second real server, which must see nothing."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp import web

from medpanel.agents.model.client import ModelCallError
from medpanel.retrieval.errors import SearchBackendError
from medpanel.retrieval.search import TavilySearch

from .conftest import write
from .fake_openai import schema_reply
from .hostile_server import Hostile, ask, completion, reply_json


async def _answer(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    """The other origin: it would answer well, to whoever sends it the prompts."""
    body = json.loads(raw or b"{}")
    return reply_json(completion(json.dumps(schema_reply(body))) | {"results": []})


def _to(other: Hostile, status: int) -> object:
    async def behave(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
        return web.Response(status=status, headers={"location": f"{other.origin}{request.path_qs}?key=shown-nowhere"})
    return behave


@pytest.mark.timeout(60)
@pytest.mark.parametrize("backend", ["openai", "azure"])
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_to_another_origin_is_not_followed(status: int, backend: str) -> None:
    with Hostile(_answer) as other, Hostile(_to(other, status)) as srv:  # type: ignore[arg-type]
        out, events = ask(srv.base_url, backend)
        assert other.requests == [], "the other origin was sent the request"
        assert srv.posts == 1, "a redirect is not retried: the next answer redirects the same way"
    assert isinstance(out, ModelCallError) and out.kind == "redirect", out
    said = str(out)
    assert f"HTTP {status} redirect to {other.origin}/" in said and "not followed" in said, said
    assert "model.base_url" in said and "shown-nowhere" not in said, said
    (event,) = events
    assert event.error.startswith("redirect") and event.attempts == 1


@pytest.mark.timeout(300)
def test_a_run_against_a_redirecting_endpoint_stops_with_one_line(tmp_path: Path) -> None:
    with Hostile(_answer) as other, Hostile(_to(other, 307)) as srv:  # type: ignore[arg-type]
        scenario = write(tmp_path / "s.yaml", f"""name: redirect
pipeline: generalist
flags: {{c: [0, 1]}}
dataset: {{source: sample}}
model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}", max_retries: 2, cache: "off"}}
run: {{workers: 2}}
""")
        run_dir = tmp_path / "run"
        out = subprocess.run([sys.executable, "-m", "medpanel", "run", "--quiet", str(scenario), "--run-dir",
                              str(run_dir)], capture_output=True, text=True, timeout=240,
                             env={**os.environ, "OPENAI_API_KEY": "sk-test"})
        assert other.requests == [], "the other origin was sent the prompts"
    logs = out.stdout + out.stderr
    assert out.returncode == 3 and "Traceback" not in logs, logs
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "stopped", status
    reason = status["reason"]
    assert f"the endpoint {srv.base_url} redirects every request" in reason and other.origin in reason, reason
    assert [line for line in logs.splitlines() if "redirects every request" in line], logs
    with sqlite3.connect(run_dir / "study.db") as conn:
        assert conn.execute("select count(*) from mp_results").fetchone() == (0,)  # all redone on resume


@pytest.mark.timeout(60)
def test_web_search_follows_no_redirect_and_says_so() -> None:
    with Hostile(_answer) as other, Hostile(_to(other, 307)) as srv:  # type: ignore[arg-type]
        with TavilySearch(api_key="tvly-test", base_url=srv.origin) as tavily, \
                pytest.raises(SearchBackendError, match="a redirect, not followed"):
            tavily.search("dka first step", 3)
        assert other.requests == []
