"""`medpanel --help` and shell completion list every command without importing the runner or the
analysis (AutoGen, openai, scipy, matplotlib, chromadb: seconds per TAB); each command still comes
with its own help and options once it is resolved."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer

from medpanel.experiments.cli.lazy import COMMANDS, LazyGroup
from medpanel.experiments.cli.main import app
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario.runspec import planned
from medpanel.experiments.run.scenario.scenario import load_scenario

HEAVY = ("openai", "autogen_core", "autogen_agentchat", "scipy", "matplotlib", "chromadb", "optuna")


def test_the_listed_help_is_each_commands_own() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, LazyGroup)
    for name, spec in COMMANDS.items():
        cmd = group.get_command(None, name)  # type: ignore[arg-type]
        assert cmd is not None, name
        assert cmd.get_short_help_str(500) == spec.help, name  # a changed docstring must change COMMANDS too


def test_help_and_completion_import_no_heavy_module() -> None:
    code = textwrap.dedent(f"""
        import io, sys, contextlib
        import typer
        from medpanel.experiments.cli.main import app, main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                main(["--help"])
            except SystemExit:
                pass
        group = typer.main.get_command(app)
        ctx = group.make_context("medpanel", [], resilient_parsing=True)
        names = [item.value for item in group.shell_complete(ctx, "r")]
        print(out.getvalue())
        print("COMPLETED", ",".join(names))
        print("HEAVY", ",".join(m for m in {HEAVY!r} if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for name in COMMANDS:
        assert f"  {name} " in out, name
    assert "COMPLETED run,report,runs" in out
    assert out.rstrip().endswith("HEAVY"), out.splitlines()[-1]  # nothing heavy was imported


def test_a_command_loads_with_its_options_and_an_unknown_one_is_one_line() -> None:
    run = subprocess.run([sys.executable, "-m", "medpanel", "run", "--help"], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and "--resume" in run.stdout and "--run-dir" in run.stdout, run.stdout + run.stderr
    bad = subprocess.run([sys.executable, "-m", "medpanel", "nosuch"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: No such command 'nosuch'. See: medpanel --help"], bad.stderr


# What a run never needs before its end (the report's analysis, plots, corpora, data frames) or at
# all (the inspect_ai and Hugging Face extras) when its questions come from a file and it has no corpus.
NOT_ON_THE_RUN_PATH = ("scipy", "statsmodels", "matplotlib", "jinja2", "chromadb", "bm25s", "pandas", "datasets",
                       "inspect_ai", "medpanel.experiments.analysis", "medpanel.experiments.cli.output")


def test_the_run_path_and_a_child_process_import_no_report_corpus_or_extra_module() -> None:
    code = textwrap.dedent(f"""
        import sys
        from medpanel.experiments.cli import main, run  # the `run` command's module, as the CLI loads it
        import medpanel.experiments.run.execution.member  # what a child process of run.processes imports
        from medpanel.experiments.cli.progress import make_progress
        from medpanel.experiments.run.scenario.plan import make_plan
        from medpanel.experiments.run.execution.runner import Runner
        print("LOADED", ",".join(m for m in {NOT_ON_THE_RUN_PATH!r} if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "LOADED", proc.stdout


def test_before_its_imports_run_reads_how_many_processes_a_run_will_use(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: x\nrun: {processes: 3, workers: 2}\n")
    assert planned(scenario, None, None).run.process_count == 3
    assert planned(scenario, None, None, processes=2).run.process_count == 2  # --processes
    assert planned(scenario, None, ["run.processes=4"]).run.process_count == 4  # --set, by the scenario's reader
    assert planned(scenario, None, ["run={processes: 5}"]).run.process_count == 5  # a --set of the whole block
    assert planned(scenario, None, None, storage="postgresql://h/db").run.process_count == 1  # --storage
    postgres = tmp_path / "pg.yaml"
    postgres.write_text("name: x\nrun: {processes: 3, storage: 'postgresql://h/db'}\n")
    assert planned(postgres, None, None).run.process_count == 1  # shared storage: no children
    variable = tmp_path / "var.yaml"
    variable.write_text("name: x\nrun: {processes: ${N_PROC}}\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("N_PROC", "6")
        assert planned(variable, None, None).run.process_count == 6  # ${VAR}s expanded as the scenario's
    broken = tmp_path / "broken.yaml"
    broken.write_text("run: [processes\n")
    with pytest.raises(UserError) as err:  # the line load_scenario gives, before any child starts
        planned(broken, None, None)
    assert str(err.value) == str(_load_error(broken))
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text("name: x\nrun: {processes: 3, wrokers: 2}\n")
    assert planned(invalid, None, None).run.process_count == 1  # the scenario's validation names it next
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text('{"scenario": {"run": {"processes": 2}}}')
    assert planned(None, run_dir, None).run.process_count == 2  # --resume: the record's
    assert planned(None, run_dir, None, processes=3).run.process_count == 3
    assert planned(None, tmp_path / "missing", None).run.process_count == 1


def _load_error(path: Path) -> UserError:
    try:
        load_scenario(path)
    except UserError as exc:
        return exc
    raise AssertionError(f"{path} loaded")


def test_before_its_imports_run_reads_the_pipeline_its_children_import_while_they_wait(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: x\npipeline: generalist\nrun: {processes: 2}\n")
    assert planned(scenario, None, None).pipeline == "generalist"
    assert planned(scenario, None, ["pipeline=panel"]).pipeline == "panel"  # --set, by the scenario's reader
    assert planned(scenario, None, ["pipeline=[1]"]).pipeline is None  # not a name: the validation names it next
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text('{"scenario": {"pipeline": "clear", "run": {"processes": 2}}}')
    assert planned(None, run_dir, None).pipeline == "clear"  # --resume: the record's
    assert planned(None, tmp_path / "missing", None).pipeline is None


MEMBER_AHEAD = """
import sys
from medpanel.experiments.run.execution import member
pipeline, given = member._arguments(sys.argv[1:])
before = {m for m in MODULES if m in sys.modules}
member._import_ahead(pipeline)
print(pipeline, given, sorted(before), sorted(m for m in MODULES if m in sys.modules))
"""


@pytest.mark.parametrize(("args", "printed"), [
    (["--pipeline", "generalist", "runs/x"], "generalist runs/x [] ['medpanel.methods.panel.generalist']"),
    (["--pipeline", "generalist"], "generalist None [] ['medpanel.methods.panel.generalist']"),
    (["runs/x"], "None runs/x [] []"),
    (["--pipeline", "mine.module:Pipeline"], "mine.module:Pipeline None [] []"),  # not one of medpanel's own
])
def test_a_child_imports_its_pipelines_modules_before_it_reads_its_part(args: list[str], printed: str) -> None:
    code = MEMBER_AHEAD.replace("MODULES", repr(["medpanel.methods.panel.generalist"]))
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == printed
