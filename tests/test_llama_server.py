"""The llama-server launcher and its watchdog, on stand-in programs (fast): the real server's e2e
checks are in test_local_model.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import httpx
import pytest

from medpanel.agents.model import llama_server
from medpanel.agents.model.cores import layout
from medpanel.agents.model.embedded import embedded_server, served_by
from medpanel.agents.model.llama_server import BINARY_ENV, EXTRA_ARGS_ENV, LlamaServer, find_llama_server
from medpanel.agents.model.local_server import LocalModelError, LocalServer
from medpanel.agents.model.spec import ModelSpec

from .proc_helpers import alive, children_of, install_fake_llama_server, still_alive_after


@pytest.fixture
def fake_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return install_fake_llama_server(tmp_path, monkeypatch)


def _took_to_end(pid: int, within_s: float) -> float:
    start = time.monotonic()
    still_alive_after([pid], within_s)
    return time.monotonic() - start


def test_starts_once_healthy_passes_the_slots_and_stops(fake_server: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EXTRA_ARGS_ENV, "--poll 0")
    log = tmp_path / "server.log"
    server = LlamaServer(n_ctx=1024, parallel=3, n_threads=2, log_path=log)
    with server:
        # start() returned only after /health said 200 (the stand-in says 503 twice first)
        health = httpx.get(f"http://127.0.0.1:{server.port}/health", timeout=5).json()
        assert health["status"] == "ok" and health["polls"] >= 4
        assert server.base_url == f"http://127.0.0.1:{server.port}/v1"
        args = json.loads((tmp_path / "args.jsonl").read_text().splitlines()[-1])
        proc = server.proc
        assert proc is not None
        watchdogs = children_of(proc.pid)
    opt = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    assert opt["--host"] == "127.0.0.1" and opt["--port"] == str(server.port)
    # every slot gets the whole context the history bound assumes
    assert opt["--parallel"] == "3" and opt["--ctx-size"] == str(1024 * 3) and "--no-kv-unified" in args
    assert opt["--threads"] == "2" and opt["--alias"] == "SmolLM2-135M-Instruct"
    assert args[-2:] == ["--poll", "0"]  # MEDPANEL_LLAMA_SERVER_ARGS come last, so they win
    assert opt["--model"].endswith(".gguf") and Path(opt["--model"]).is_file()
    assert proc.poll() is not None, "stop() left the server running"
    assert len(watchdogs) == 1, watchdogs
    assert _took_to_end(watchdogs[0], 3) < 3, "the watchdog outlived the server it watched"
    assert "fake llama-server: listening" in log.read_text()


def test_a_server_that_exits_at_start_is_one_error_naming_the_log(fake_server: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_EXIT", "3")
    log = tmp_path / "server.log"
    with pytest.raises(LocalModelError, match=rf"llama-server exited with code 3; see {log}"):
        LlamaServer(n_ctx=512, log_path=log).start()
    assert "failing on purpose" in log.read_text()


def test_an_unusable_program_path_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BINARY_ENV, str(tmp_path / "nope"))
    with pytest.raises(LocalModelError, match=rf"{BINARY_ENV}=.*nope is not an executable file"):
        find_llama_server()


def test_a_missing_build_names_the_setup_command_and_the_variable(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    monkeypatch.delenv(BINARY_ENV, raising=False)
    monkeypatch.setattr(llama_server.sys, "prefix", str(tmp_path))  # no venv-built program

    def missing(name: str) -> None:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(llama_server.metadata, "distribution", missing)
    with pytest.raises(LocalModelError, match=rf"run make embedded .*or set {BINARY_ENV} to a llama-server program"):
        find_llama_server()


def test_the_venv_program_make_embedded_built_comes_before_the_package(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    monkeypatch.delenv(BINARY_ENV, raising=False)
    program = tmp_path / "bin" / "llama-server"
    program.parent.mkdir()
    program.write_text("#!/bin/sh\necho 'version: 1 (abc)'\n")
    program.chmod(0o755)
    (program.parent / "llama-server.json").write_text(json.dumps({"llama_cpp": "b7", "target": "llama-server"}))
    monkeypatch.setattr(llama_server.sys, "prefix", str(tmp_path))
    assert find_llama_server() == (program, None)
    served = served_by(ModelSpec(backend="local"))
    assert served is not None and served["built_by"] == "make embedded (llama.cpp b7, llama-server only)", served
    program.chmod(0o644)  # not executable: not taken, and no package to fall back on

    def missing(name: str) -> None:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(llama_server.metadata, "distribution", missing)
    with pytest.raises(LocalModelError, match="run make embedded"):
        find_llama_server()


WATCHED = """
import subprocess, sys, time
proc = subprocess.Popen([sys.executable, "-m", "medpanel.agents.model.watch_exec",
                         "--parent", str(__import__("os").getpid()),
                         "--", "/bin/sleep", "600"], start_new_session=True)
time.sleep(0.5)  # the watchdog has forked and the program has replaced the shim
print(proc.pid, flush=True)
time.sleep(600)
"""


def test_the_watchdog_kills_the_program_within_a_second_of_a_sigkilled_runner() -> None:
    runner = subprocess.Popen([sys.executable, "-c", WATCHED], stdout=subprocess.PIPE, text=True)
    assert runner.stdout is not None
    pid = int(runner.stdout.readline())
    # the pid the runner holds is the program itself, not a wrapper around it
    assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == b"/bin/sleep"
    watchdog = children_of(pid)
    assert len(watchdog) == 1
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    took = _took_to_end(pid, 5)
    assert not alive(pid), f"the program outlived its SIGKILLed runner ({took:.1f} s)"
    assert _took_to_end(watchdog[0], 3) < 3


def test_the_watchdog_refuses_a_program_it_cannot_run(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "medpanel.agents.model.watch_exec", "--parent", str(os.getpid()), "--",
                          str(tmp_path / "missing")], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0 and "is not an executable file" in out.stderr


def test_model_local_server_picks_the_program_and_its_context() -> None:
    # One server (`local_servers: 1`); the default's several are tests/test_embedded_cores.py's.
    default = embedded_server(ModelSpec(backend="local", local_servers=1))
    assert isinstance(default, LlamaServer) and (default.n_ctx, default.parallel) == (8192, 4)
    wide = embedded_server(ModelSpec(backend="local", local_parallel=8, local_servers=1, context_window=2048))
    assert isinstance(wide, LlamaServer) and (wide.n_ctx, wide.parallel) == (2048, 8)
    other = embedded_server(ModelSpec(backend="local", local_server="llama-cpp-python", context_window=4096))
    assert isinstance(other, LocalServer) and other.n_ctx == 4096
    with pytest.raises(ValueError, match="local_server"):
        ModelSpec(backend="local", local_server="ollama")


def test_run_json_records_which_server_serves(fake_server: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from medpanel.experiments.run.execution.runner import Runner
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import Scenario

    def meta_for(model: dict, name: str) -> dict:
        scenario = Scenario.model_validate({"name": "srv", "pipeline": "generalist", "flags": {"c": [0]},
                                            "dataset": {"limit": 1, "subsets": ["medqa-style"]}, "model": model})
        runner = Runner.create(make_plan(scenario, base_dir=tmp_path), run_dir=tmp_path / name)
        return json.loads((runner.run_dir / "run.json").read_text(encoding="utf-8"))

    monkeypatch.setenv(EXTRA_ARGS_ENV, "--poll 0")
    assert meta_for({"backend": "local", "local_parallel": 2}, "a")["model"]["local_server"] == {
        "server": "llama-server", "version": "version: 4242 (fakecommit)", "parallel": 2,
        "built_by": f"{BINARY_ENV}={fake_server}", "extra_args": ["--poll", "0"],
        **layout(2, len(os.sched_getaffinity(0))).record()}
    other = meta_for({"backend": "local", "local_server": "llama-cpp-python"}, "b")["model"]["local_server"]
    assert other["server"] == "llama-cpp-python" and other["parallel"] == 1
    assert served_by(ModelSpec(backend="openai", name="m")) is None
    assert served_by(ModelSpec(backend="scripted")) is None


def test_the_two_servers_never_answer_each_others_cached_requests() -> None:
    from medpanel.agents.model.cache import cache_key
    from medpanel.agents.model.client import QuestionSession, RecordingClient

    messages = [{"role": "user", "content": "same request"}]
    requests = {server: RecordingClient(QuestionSession(spec=ModelSpec(backend="local", local_server=server),
                                                        inner=None))._request(messages)  # type: ignore[arg-type]
                for server in ("llama-server", "llama-cpp-python")}
    assert cache_key(requests["llama-server"]) != cache_key(requests["llama-cpp-python"])
    # llama-cpp-python's requests keep the key they always had, so existing run caches stay valid
    assert requests["llama-cpp-python"]["base_url"] == "embedded"


def test_auto_mode_for_the_embedded_model_is_json_object_with_its_cap_on_both_servers() -> None:
    # llama-server takes json_schema too (test_llama_server_e2e), but only json_object + schema
    # carries the free-text cap the 135M model needs, so `auto` keeps it for both servers.
    for server in ("llama-server", "llama-cpp-python"):
        spec = ModelSpec(backend="local", local_server=server)  # type: ignore[arg-type]
        assert spec.mode == "json_object" and spec.string_cap == 240
    assert ModelSpec(backend="openai", name="m").mode == "json_schema"
