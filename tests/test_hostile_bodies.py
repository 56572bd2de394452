"""A reply's body is bounded on both HTTP paths (aiohttp's LeanChatClient; the openai SDK's httpx
for Azure): a gzip bomb or a plain huge body is refused at `model.max_reply_bytes`, a body that
drips for ever ends at the call's timeout, JSON nested 100k deep, a huge `choices` list and a body
that is not UTF-8 are bad replies. Each is retried, then an error naming the bound; none hangs,
crashes or takes gigabytes. Real local HTTP servers that misbehave, the real clients."""

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

from medpanel.agents.model.client import ModelCallError

from .conftest import write
from .hostile_server import Hostile, ask, completion, drip, gzip_bomb, reply_json

BACKENDS = ["openai", "azure"]


async def _bomb(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    return await gzip_bomb(request, inflated=64 * 2**20)  # 64 MiB from about 64 KiB, 8x the default bound


async def _huge(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    return reply_json(completion("x" * (24 * 2**20)))  # plain, 3x the default bound


async def _deep(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    return reply_json(b'{"choices": ' + b"[" * 20_000 + b"]" * 20_000 + b"}")  # deeper than Python recurses


async def _deepest(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    return reply_json(b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")


async def _many_choices(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    body = completion()
    return reply_json(body | {"choices": body["choices"] * 200_000})


async def _fifty_choices(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    body = completion()
    return reply_json(body | {"choices": body["choices"] * 50})


async def _latin1(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    return reply_json(json.dumps(completion("caf\u00e9 \u00fc"), ensure_ascii=False).encode("latin-1"))


async def _drip(request: web.Request, raw: bytes, n: int) -> web.StreamResponse:
    return await drip(request, every_s=0.2, limit_s=120)


CASES: dict[str, tuple[Any, dict[str, Any], str, str]] = {
    # name: (behaviour, model settings, error kind, words the error must hold)
    "gzip bomb": (_bomb, {}, "bad_response", "over model.max_reply_bytes (8,388,608 bytes, decompressed)"),
    "huge body": (_huge, {}, "bad_response", "over model.max_reply_bytes (8,388,608 bytes, decompressed)"),
    "a set bound": (_huge, {"max_reply_bytes": 65536}, "bad_response", "over model.max_reply_bytes (65,536 bytes"),
    "nested 20k deep": (_deep, {}, "bad_response", "nests its JSON deeper than it can be read"),
    "nested 100k deep": (_deepest, {}, "bad_response", "more than 100,000 JSON objects or arrays"),
    "200k choices": (_many_choices, {}, "bad_response", "more than 100,000 JSON objects or arrays"),
    "50 choices": (_fifty_choices, {}, "bad_response", "lists 50 choices"),
    "not UTF-8": (_latin1, {}, "bad_response", "not UTF-8 text"),
    "drips for ever": (_drip, {"timeout_s": 1.0}, "timeout", "no whole reply within model.timeout_s (1 s)"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_body_is_a_retried_error_naming_its_bound(case: str, backend: str) -> None:
    behave, settings, kind, words = CASES[case]
    with Hostile(behave) as srv:
        out, events = ask(srv.base_url, backend, **settings)
        assert srv.posts == 2, "the call is retried once (max_retries 1)"
    assert isinstance(out, ModelCallError) and out.kind == kind, out
    assert words in str(out), out
    (event,) = events
    assert event.attempts == 2 and event.error.startswith(kind) and event.content == ""


def _run(tmp_path: Path, base_url: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    scenario = write(tmp_path / "s.yaml", f"""name: bodies
pipeline: generalist
flags: {{c: [0]}}
dataset: {{source: sample, limit: 2}}
model: {{backend: openai, name: fake-model, base_url: "{base_url}", max_retries: 1, cache: "off"}}
run: {{workers: 2}}
""")
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "medpanel", "run", "--quiet", str(scenario), "--run-dir", str(run_dir)],
                         capture_output=True, text=True, timeout=240, env={**os.environ, "OPENAI_API_KEY": "sk-test"})
    return out, run_dir


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("behave", "words"), [(_bomb, "over model.max_reply_bytes"),
                                               (_deep, "nests its JSON deeper")], ids=["gzip bomb", "deep JSON"])
def test_a_run_against_a_hostile_body_records_error_rows(tmp_path: Path, behave: Any, words: str) -> None:
    with Hostile(behave) as srv:
        out, run_dir = _run(tmp_path, srv.base_url)
    logs = out.stdout + out.stderr
    assert out.returncode == 0 and "Traceback" not in logs, logs
    assert "4 of 4 pairs are error rows" in out.stdout, out.stdout
    with sqlite3.connect(run_dir / "study.db") as conn:
        rows = list(conn.execute("select error_kind, error, answer, tokens from mp_results"))
    assert len(rows) == 4 and all(k == "bad_response" and words in e and not a and t == 0 for k, e, a, t in rows), rows
