"""The embedded model on several single-threaded llama-servers (agents/model/cores.py): the layout a
machine gets, its settings, run.json's record, requests spread over the servers, and no server left
behind, on stand-in programs (fast)."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from autogen_core.models import UserMessage

from medpanel.agents.model import embedded
from medpanel.agents.model.backends import build_client
from medpanel.agents.model.cores import EmbeddedPool, Layout, layout
from medpanel.agents.model.embedded import embedded_server, served_by
from medpanel.agents.model.lean_chat import LeanChatClient
from medpanel.agents.model.llama_server import LlamaServer
from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.model.spread import POOL_SEP, Spread, spread_for

from .proc_helpers import alive, install_fake_llama_server, still_alive_after


@pytest.fixture
def fake_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return install_fake_llama_server(tmp_path, monkeypatch)


def _options(line: str) -> dict[str, str]:
    args = json.loads(line)
    return {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}


# --- the layout a machine gets ---------------------------------------------------------------------

@pytest.mark.parametrize(("parallel", "cores", "expected"), [
    (4, 1, Layout(servers=4, threads=1, slots=1, cores=1)),
    (4, 2, Layout(servers=4, threads=1, slots=1, cores=2)),   # the quickstart on a 2-core laptop
    (4, 8, Layout(servers=4, threads=1, slots=1, cores=8)),
    (4, 16, Layout(servers=4, threads=3, slots=1, cores=16)),  # cores left after one for the runner
    (8, 2, Layout(servers=4, threads=1, slots=2, cores=2)),
    (8, 8, Layout(servers=8, threads=1, slots=1, cores=8)),
    (2, 2, Layout(servers=2, threads=1, slots=1, cores=2)),
    (1, 2, Layout(servers=1, threads=1, slots=1, cores=2)),
    (1, 4, Layout(servers=1, threads=3, slots=1, cores=4)),   # one server: the layout medpanel had before
])
def test_the_layout_follows_the_cores_and_the_requests_at_once(parallel: int, cores: int, expected: Layout) -> None:
    assert layout(parallel, cores) == expected


def test_the_users_servers_and_threads_win() -> None:
    assert layout(4, 2, servers=1) == Layout(servers=1, threads=1, slots=4, cores=2)
    assert layout(4, 2, servers=1, threads=2) == Layout(servers=1, threads=2, slots=4, cores=2)
    assert layout(4, 2, servers=3) == Layout(servers=3, threads=1, slots=2, cores=2)
    assert layout(4, 16, threads=1).threads == 1


def test_embedded_server_starts_a_pool_only_for_several_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "machine_cores", lambda: 2)
    pool = embedded_server(ModelSpec(backend="local"))
    assert isinstance(pool, EmbeddedPool) and len(pool.servers) == 4
    assert {(s.parallel, s.n_threads, s.n_ctx) for s in pool.servers} == {(1, 1, 8192)}
    single = embedded_server(ModelSpec(backend="local", local_servers=1))
    assert isinstance(single, LlamaServer) and (single.parallel, single.n_threads) == (4, 1)


# --- settings --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "message"), [
    ({"local_servers": 5}, "local_servers (5) is more than local_parallel (4)"),
    ({"local_servers": 0}, "local_servers"),
    ({"local_threads": 0}, "local_threads"),
    ({"local_server": "llama-cpp-python", "local_servers": 2}, "apply to llama-server only"),
])
def test_bad_layout_settings_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ModelSpec(backend="local", **fields)


def test_a_bad_layout_in_a_scenario_is_one_line_naming_the_file_and_field(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\npipeline: generalist\nflags: {c: [0]}\ndataset: {source: sample, limit: 1}\n"
                        "model: {backend: local, local_servers: 9}\n")
    out = subprocess.run([sys.executable, "-m", "medpanel", "run", str(scenario), "--run-dir", str(tmp_path / "r")],
                         capture_output=True, text=True, timeout=120)
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert out.returncode == 2, out.stderr
    assert len(lines) == 1 and "s.yaml" in lines[0] and "local_servers" in lines[0], out.stderr
    assert "Traceback" not in out.stderr


# --- run.json ---------------------------------------------------------------------------------------

def test_run_json_records_the_layout_this_machine_gets(fake_server: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from medpanel.experiments.run.execution.runner import Runner
    from medpanel.experiments.run.scenario.plan import make_plan
    from medpanel.experiments.run.scenario.scenario import Scenario

    monkeypatch.setattr(embedded, "machine_cores", lambda: 2)

    def recorded(model: dict[str, object], name: str) -> dict[str, object]:
        scenario = Scenario.model_validate({"name": "srv", "pipeline": "generalist", "flags": {"c": [0]},
                                            "dataset": {"limit": 1, "subsets": ["medqa-style"]}, "model": model})
        runner = Runner.create(make_plan(scenario, base_dir=tmp_path), run_dir=tmp_path / name)
        doc = json.loads((runner.run_dir / "run.json").read_text(encoding="utf-8"))
        return doc["model"]["local_server"]  # type: ignore[no-any-return]

    pool = recorded({"backend": "local"}, "a")
    assert pool["server"] == "llama-server" and pool["parallel"] == 4
    assert (pool["servers"], pool["threads"], pool["slots"], pool["cores"]) == (4, 1, 1, 2)
    single = recorded({"backend": "local", "local_servers": 1, "local_threads": 2}, "b")
    assert (single["servers"], single["threads"], single["slots"]) == (1, 2, 4)
    assert served_by(ModelSpec(backend="scripted")) is None


# --- requests spread over the servers ----------------------------------------------------------------

def test_the_least_busy_server_gets_each_request() -> None:
    spread = Spread(["a", "b", "c"])
    with spread.take() as first, spread.take() as second:
        with spread.take() as third:
            assert (first, second, third) == ("a", "b", "c")
        with spread.take() as again:
            assert again == "c"  # a and b are still busy
    with spread.take() as idle:
        assert idle == "a"  # all idle: the first
    assert spread.in_flight == [0, 0, 0] and spread.sent == [2, 1, 2]


def test_one_spread_per_set_of_servers_and_none_for_one_server() -> None:
    pool = POOL_SEP.join(["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"])
    assert spread_for(pool) is spread_for(pool)
    assert spread_for("http://127.0.0.1:1/v1") is None


class _Chat(http.server.BaseHTTPRequestHandler):
    """A chat endpoint that holds each reply a moment, so that requests overlap."""

    hits: list[int]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.hits.append(int(self.server.server_address[1]))  # type: ignore[index]
        time.sleep(0.3)
        body = json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def two_endpoints() -> Iterator[tuple[list[int], list[int]]]:
    hits: list[int] = []
    handler = type("Chat", (_Chat,), {"hits": hits})
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) for _ in range(2)]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield [s.server_address[1] for s in servers], hits
    for s in servers:
        s.shutdown()
        s.server_close()


def test_a_pooled_client_spreads_concurrent_requests_over_the_servers(
        two_endpoints: tuple[list[int], list[int]]) -> None:
    ports, hits = two_endpoints
    url = POOL_SEP.join(f"http://127.0.0.1:{p}/v1" for p in ports)
    client = build_client(ModelSpec(backend="local", max_tokens=16), base_url=url)
    assert isinstance(client, LeanChatClient)

    async def calls() -> list[str]:
        try:
            results = await asyncio.gather(*(client.create([UserMessage(content="hi", source="user")])
                                              for _ in range(4)))
        finally:
            await client.close()
        return [str(r.content) for r in results]

    assert asyncio.run(calls()) == ["ok"] * 4
    assert sorted(hits) == sorted(ports * 2), hits  # two each: never all four on one server


# --- no server left behind ----------------------------------------------------------------------------

def test_the_pool_starts_every_server_on_its_own_port_and_stops_them_all(fake_server: Path, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    pool = EmbeddedPool(layout(4, 2), n_ctx=1024, log_path=log)
    with pool:
        urls = pool.base_url.split(POOL_SEP)
        pids = pool.pids()
        assert len(urls) == 4 and len(set(urls)) == 4 and all(alive(p) for p in pids)
    lines = (tmp_path / "args.jsonl").read_text().splitlines()
    assert len(lines) == 4
    for line in lines:
        opt = _options(line)
        assert (opt["--threads"], opt["--threads-batch"], opt["--parallel"]) == ("1", "1", "1")
        assert opt["--ctx-size"] == "1024" and int(opt["--cache-ram"]) == 128
    assert still_alive_after(pids, 3) == [], "stop() left servers running"


def test_a_server_that_fails_to_start_stops_the_others(fake_server: Path, tmp_path: Path) -> None:
    from medpanel.agents.model.local_server import LocalModelError

    pool = EmbeddedPool(layout(4, 2), n_ctx=1024)
    broken = pool.servers[2]
    broken.start = lambda: (_ for _ in ()).throw(LocalModelError("llama-server exited with code 1"))  # type: ignore[method-assign]
    with pytest.raises(LocalModelError, match="exited with code 1"):
        pool.start()
    started = [s.proc.pid for s in pool.servers if s.proc is not None]
    assert len(started) == 3 and still_alive_after(started, 3) == []


RUNNER = textwrap.dedent("""
    import sys
    from medpanel.agents.model.cores import EmbeddedPool, layout
    pool = EmbeddedPool(layout(4, 2), n_ctx=1024)
    pool.start()
    print(" ".join(map(str, pool.pids())), flush=True)
    sys.stdin.read()
""")


def test_no_server_outlives_a_sigkilled_runner(fake_server: Path) -> None:
    runner = subprocess.Popen([sys.executable, "-c", RUNNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert runner.stdout is not None
    pids = [int(p) for p in runner.stdout.readline().split()]
    assert len(pids) == 4 and all(alive(p) for p in pids)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    assert still_alive_after(pids, 5) == [], "servers outlived their SIGKILLed runner"
