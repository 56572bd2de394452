"""A `medpanel` process pays nothing it does not use at either end: a run imports the openai SDK only
where a call needs it, and the process leaves as soon as its store is closed and its output flushed
(no interpreter teardown), with its exit code, and with no WAL, shared-memory file or lock left."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import ROOT, write

SCENARIO = ("name: ends\npipeline: panel\nflags: {c: [0, 1]}\nsettings: {rounds: 1, turns_per_round: 1}\n"
            "dataset: {source: sample, limit: 2}\nmodel: {backend: scripted}\nrun: {workers: 2}\n")


def _loaded(code: str, tmp_path: Path) -> list[str]:
    """The SDK modules loaded by the end of `code` (run in a fresh interpreter, which prints them)."""
    script = textwrap.dedent(code) + textwrap.dedent("""
        import sys
        print("LOADED", json.dumps(sorted(m for m in sys.modules
                                          if m == "openai" or m.startswith(("openai.", "autogen_ext.models.openai")))))
    """)
    proc = subprocess.run([sys.executable, "-c", "import json\n" + script], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("LOADED "))
    return list(json.loads(line.removeprefix("LOADED ")))


def test_a_scripted_run_never_imports_the_openai_sdk(tmp_path: Path) -> None:
    write(tmp_path / "s.yaml", SCENARIO)
    loaded = _loaded(f"""
        import medpanel
        medpanel.run({str(tmp_path / 's.yaml')!r}, run_dir={str(tmp_path / 'run')!r})
    """, tmp_path)
    assert (tmp_path / "run" / "study.db").is_file()  # it ran
    assert loaded == []


def test_a_lean_endpoint_run_never_imports_the_openai_sdk(tmp_path: Path) -> None:
    # json_object mode (the embedded model's, and any llama.cpp or vLLM server's): every call goes
    # through the aiohttp client; the SDK would only be needed for an error's exception.
    loaded = _loaded(f"""
        import medpanel
        from benchmarks.fake_server import FakeOpenAI, valid_reply
        with FakeOpenAI(valid_reply) as server:
            medpanel.run({{"name": "lean", "pipeline": "panel", "flags": {{"c": [0]}},
                          "settings": {{"rounds": 1, "turns_per_round": 1}},
                          "dataset": {{"source": "sample", "limit": 1}},
                          "model": {{"backend": "openai", "name": "fake-model", "base_url": server.base_url,
                                    "structured_output": "json_object"}},
                          "run": {{"workers": 1}}}}, run_dir={str(tmp_path / 'run')!r})
            assert len(server.requests) > 0
    """, tmp_path)
    assert loaded == []


def test_an_error_reply_still_raises_the_sdks_exception_for_it() -> None:
    # The SDK is imported on the error path, so retries and the error kinds read the same classes.
    import asyncio

    import openai
    from autogen_core.models import ModelInfo, UserMessage

    from benchmarks.fake_server import FakeOpenAI, completion
    from medpanel.agents.model.lean_chat import LeanChatClient
    from medpanel.agents.model.retries import error_kind

    info = ModelInfo(vision=False, function_calling=False, json_output=True, family="unknown",
                     structured_output=True)
    with FakeOpenAI(lambda body, n: (429, {"retry-after": "1"}, completion("x"))) as server:
        client = LeanChatClient(base_url=server.base_url, api_key="k", timeout_s=5, create_args={"model": "m"},
                                model_info=info)

        async def call() -> BaseException:
            try:
                await client.create([UserMessage(content="hi", source="user")])
            except Exception as exc:  # the refusal under test
                return exc
            finally:
                await client.close()
            raise AssertionError("a 429 was taken as an answer")

        exc = asyncio.run(call())
    assert isinstance(exc, openai.RateLimitError)
    assert error_kind(exc) == "rate_limit"


def _cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "medpanel", *argv], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)


def test_the_process_leaves_with_its_exit_code_and_nothing_of_its_store_left_behind(tmp_path: Path) -> None:
    write(tmp_path / "s.yaml", SCENARIO)
    run_dir = tmp_path / "run"
    done = _cli(tmp_path, "run", "s.yaml", "--run-dir", str(run_dir), "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "accuracy" in done.stdout.lower()  # what it printed was flushed before it left
    left = sorted(p.name for p in run_dir.iterdir())
    assert "study.db" in left
    assert not [n for n in left if n.endswith(("-wal", "-shm", "-journal")) or n == "runner.lock"], left
    assert _cli(tmp_path, "report", str(run_dir)).returncode == 0
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(("-wal", "-shm"))]


def test_a_stopped_run_exits_3_and_bad_input_exits_2(tmp_path: Path) -> None:
    write(tmp_path / "s.yaml", SCENARIO)
    stopped = _cli(tmp_path, "run", "s.yaml", "--run-dir", str(tmp_path / "run"), "--quiet", "--max-calls", "1")
    assert stopped.returncode == 3, stopped.stdout[-1000:] + stopped.stderr[-1000:]
    assert not (tmp_path / "run" / "runner.lock").exists()
    bad = _cli(tmp_path, "report", str(tmp_path / "nowhere"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: "), bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_entry_point_skips_the_teardown_but_not_the_exit_functions(tmp_path: Path) -> None:
    # A finalizer that runs only in the interpreter's teardown (a module's objects freed) is
    # skipped; an atexit function (a library's own) still runs, and the exit code is main's.
    code = textwrap.dedent("""
        import atexit, sys
        class Teardown:
            def __del__(self):
                sys.stdout.write("TEARDOWN\\n"); sys.stdout.flush()
        sys.modules[__name__].keep = Teardown()
        atexit.register(lambda: sys.stdout.write("ATEXIT\\n"))
        sys.argv = ["medpanel", "report", "nowhere"]
        from medpanel.experiments.cli.main import entry
        entry()
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "ATEXIT" in proc.stdout
    assert "TEARDOWN" not in proc.stdout


def test_the_reading_commands_module_imports_no_command_s_own_analysis(tmp_path: Path) -> None:
    # report, show, runs, view, compare, export and audit share one module (cli/lazy.py): resolving
    # any of them imports that module, so each command's own analysis waits for the command.
    code = textwrap.dedent("""
        import sys
        from medpanel.experiments.cli import inspect
        print("LOADED", sorted(m for m in ("openai", "jinja2", "matplotlib", "medpanel.experiments.view.viewer",
                                           "medpanel.experiments.analysis.compare", "medpanel.retrieval.leakage",
                                           "medpanel.experiments.analysis.inspect_export") if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "LOADED []"
