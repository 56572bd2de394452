"""`medpanel --help` and shell completion list every command without importing the runner or the
analysis (AutoGen, openai, scipy, matplotlib, chromadb: seconds per TAB); each command still comes
with its own help and options once it is resolved."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import typer

from medpanel.experiments.cli.lazy import COMMANDS, LazyGroup
from medpanel.experiments.cli.main import app

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
