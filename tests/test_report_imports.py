"""`medpanel report`'s command path imports what the report reads and builds, not the runner's
machinery: no model client (AutoGen, openai), no corpus or web search, no SQL toolkit until a
run's store is opened, no SciPy until a table runs a bootstrap or an exact test, and no data
frames or model fits until a fit runs. Each is checked in a fresh interpreter, so what another
test imported does not hide an import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from .import_probe import loaded_after

# Module -> why the report's command path must not import it when it is resolved.
NOT_ON_THE_REPORT_PATH = {
    "autogen_core": "the model client: a report sends nothing",
    "autogen_agentchat": "the role agents: a report runs no agent",
    "openai": "the model backends",
    "httpx": "the web search backends",
    "medpanel.retrieval": "corpora and retrievers",
    "medpanel.methods": "a method's pipeline: imported when its tables are asked for, not before",
    "sqlalchemy": "the store: imported when the run's store is opened",
    "scipy": "the statistics: imported by the bootstrap and the exact tests that use them",
    "statsmodels": "the model fits: imported when a fit runs",
    "pandas": "statsmodels' data frames",
}


def _imported_after(code: str) -> list[str]:
    return loaded_after(code, sorted(NOT_ON_THE_REPORT_PATH))


def test_the_report_command_and_its_analysis_import_no_heavy_module() -> None:
    # What `medpanel report RUN` imports before it opens the run: the command as the CLI resolves it,
    # the tables' builders, the digests' reader and the printing.
    found = _imported_after("""
        import typer
        from medpanel.experiments.cli.main import app
        typer.main.get_command(app).get_command(None, "report")
        import medpanel.experiments.analysis.digest
        import medpanel.experiments.analysis.report
        import medpanel.experiments.cli.inspect
        import medpanel.experiments.cli.output
    """)
    assert found == [], {m: NOT_ON_THE_REPORT_PATH[m] for m in found}


def test_the_statistics_load_scipy_only_when_a_test_runs() -> None:
    found = _imported_after("""
        from medpanel.experiments.analysis import stats
        from medpanel.experiments.analysis.inference import resample
        assert stats.mean_sd([1.0, 2.0]) == (1.5, 0.7071067811865476)
        # one shared question: no interval (fewer than 2) and no discordance (nothing to test)
        assert stats.paired_comparison("a", {1: True}, "b", {1: True}).p_mcnemar == 1.0
        assert resample.sign_flip_pvalue(__import__("numpy").zeros(3), 1) == 1.0
    """)
    assert "scipy" not in found
    found = _imported_after("""
        from medpanel.experiments.analysis import stats
        stats.paired_comparison("a", {1: True, 2: False}, "b", {1: False, 2: True}, n_boot=100)
    """)
    assert "scipy" in found  # the bootstrap and McNemar's test ran: SciPy is theirs


def test_the_budget_and_rate_limits_import_no_model_client() -> None:
    # A run's settings (its scenario, budget and rate limits) are read by the report's header.
    found = _imported_after("""
        import medpanel.experiments.run.scenario.scenario
        import medpanel.experiments.run.tracking.budget
        import medpanel.agents.pipelines.registry
    """)
    assert "autogen_core" not in found and "sqlalchemy" not in found, found


def test_the_panels_settings_and_tables_import_no_agent_or_client() -> None:
    # What a report of a panel run asks of its pipeline: the settings with their defaults (the
    # protocol line) and the tables; the discussion, its agents and CLEAR's adjudication stay out.
    found = _imported_after("""
        from medpanel.agents.pipelines.registry import get_pipeline
        panel = get_pipeline("panel")
        assert panel.settings_model.model_validate({}).model_dump()["rounds"] >= 1 and panel.tables
        import medpanel.methods.panel.pipeline
        assert "medpanel.methods.panel.discussion" not in sys.modules
        assert "medpanel.methods.panel.channels.clear" not in sys.modules
    """)
    assert not {"autogen_core", "autogen_agentchat", "openai", "sqlalchemy", "scipy"} & set(found), found


PANEL = """name: probe-panel
pipeline: panel
flags: {c: [0, 1]}
settings: {rounds: 1, turns_per_round: 2}
dataset: {source: sample, limit: 2}
model: {backend: scripted}
run: {workers: 1}
"""


def test_medpanel_report_of_a_panel_run_loads_no_client_store_toolkit_or_discussion(tmp_path: Path) -> None:
    from tests.rundir_helpers import finished_run

    run = finished_run(tmp_path, PANEL)
    probe = textwrap.dedent(f"""
        import contextlib, io, sys
        from medpanel.experiments.cli.main import main
        with contextlib.redirect_stdout(io.StringIO()) as out:
            try:
                main(["report", {str(run)!r}])
            except SystemExit as exc:
                assert not exc.code, exc.code
        assert "Tables written to" in out.getvalue(), out.getvalue()
        unwanted = ("autogen_core", "autogen_agentchat", "openai", "sqlalchemy", "medpanel.methods.panel.discussion",
                    "medpanel.methods.clear.adjudication")
        print("LOADED", ",".join(m for m in unwanted if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "LOADED", proc.stdout.splitlines()[-1]


def test_the_summary_at_a_runs_end_imports_nothing_the_run_did_not_import_meanwhile(tmp_path: Path) -> None:
    # `medpanel run` imports the summary's modules in a thread while questions run, so the run's
    # end pays for none of them; the statistics' own imports on first use (SciPy) are among them.
    from tests.rundir_helpers import finished_run

    run = finished_run(tmp_path, PANEL)
    probe = textwrap.dedent(f"""
        import contextlib, importlib, io, sys
        from medpanel.experiments.cli.run_session import REPORT_MODULE, SUMMARY_MODULES
        for name in (REPORT_MODULE, *SUMMARY_MODULES):
            importlib.import_module(name)
        before = set(sys.modules)
        from medpanel.experiments.cli import output
        with contextlib.redirect_stdout(io.StringIO()):
            output.print_summary(__import__("pathlib").Path({str(run)!r}))
        # medpanel's own method report parts (hundredths of a second together), a codec and
        # rich's emoji table are imported as the summary asks for them; no other package.
        new = sorted({{m.split(".")[0] for m in set(sys.modules) - before}} - {{"medpanel", "rich", "encodings"}})
        print("NEW", ",".join(new))
    """)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "NEW", proc.stdout.splitlines()[-1]
