"""llama.cpp's llama-server with the embedded model: lifecycle, the structured-output modes its
grammar takes, and one question end to end (needs the [local] extra; slow)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from medpanel.agents.model.llama_server import LlamaServer
from medpanel.agents.model.structured import answer_model, capped_schema, format_instructions, strict_response_format
from medpanel.experiments.run.store.transcript_log import documents

from .conftest import ROOT

pytestmark = pytest.mark.e2e

QUESTION = ("A 24-year-old woman has palpitations, heat intolerance, weight loss, a diffuse goitre and "
            "proptosis; TSH is undetectable. The most likely diagnosis?\nA. Graves disease\nB. Hashimoto "
            "thyroiditis\nC. Toxic multinodular goitre\nD. Subacute thyroiditis")


def _ask(base_url: str, response_format: dict) -> dict:
    model = answer_model(["A", "B", "C", "D"])
    body = {"model": "SmolLM2-135M-Instruct", "temperature": 0, "seed": 42, "max_tokens": 120,
            "messages": [{"role": "user", "content": f"{QUESTION}\n\n{format_instructions(model)}"}],
            "response_format": response_format}
    r = httpx.post(f"{base_url}/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_llama_server_answers_both_schema_modes_and_stops(tmp_path: Path) -> None:
    model = answer_model(["A", "B", "C", "D"])
    log = tmp_path / "server.log"
    with LlamaServer(n_ctx=2048, parallel=2, log_path=log) as server:
        assert httpx.get(f"{server.base_url}/models", timeout=10).json()["data"][0]["id"] == "SmolLM2-135M-Instruct"
        # json_object + schema (what `auto` sends the embedded model): the grammar holds the
        # free-text cap, so a 135M model cannot ramble inside a string until max_tokens cuts it.
        capped = _ask(server.base_url, {"type": "json_object", "schema": capped_schema(model, 40)})
        reply = json.loads(capped["choices"][0]["message"]["content"])
        assert reply["answer"] in "ABCD" and len(reply["reasoning"]) <= 40, reply
        # OpenAI's strict json_schema form is grammar-constrained too (no cap: strict schemas have none)
        strict = _ask(server.base_url, strict_response_format(model))
        model.model_validate_json(strict["choices"][0]["message"]["content"])
        proc = server.proc
    assert proc is not None and proc.poll() is not None
    assert "llama_server: listening on http://127.0.0.1:" in log.read_text(errors="replace")


@pytest.mark.timeout(900)
def test_one_question_end_to_end_through_llama_server(tmp_path: Path) -> None:
    run_dir = tmp_path / "qs"
    proc = subprocess.run([sys.executable, "-m", "medpanel", "run", str(ROOT / "scenarios/quickstart.yaml"),
                           "--set", "dataset={source: sample, subsets: [medqa-style], limit: 1}",
                           "--run-dir", str(run_dir), "--quiet"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    meta = json.loads((run_dir / "run.json").read_text())
    served = meta["model"]["local_server"]
    assert served["server"] == "llama-server" and served["parallel"] == 4 and served["version"], served
    with sqlite3.connect(run_dir / "study.db") as conn:
        rows = conn.execute("select condition, answer, invalid, error from mp_results").fetchall()
    assert sorted(r[0] for r in rows) == ["c0", "c1"] and all(r[3] is None for r in rows), rows
    assert all((r[1] == "") == bool(r[2]) for r in rows)
    doc = next(d for d in map(json.loads, documents(run_dir)) if d["condition"] == "c1")
    calls = [e for e in doc["events"] if e["kind"] == "call" and not e.get("cache_hit")]
    assert calls and all(e["usage"]["completion_tokens"] > 0 for e in calls)
    # the program make embedded built and installed into the venv, with its note
    assert served["built_by"] == "make embedded (llama.cpp b11434, llama-server only)", served
    # the session's log is llama-server's own
    assert "llama_server: listening on http://127.0.0.1:" in (run_dir / "local_server.log").read_text(errors="replace")
