"""`medpanel scenarios`, `medpanel init` and typer's shell completion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from medpanel.experiments.cli.catalogue import first_sentence
from medpanel.experiments.cli.main import app
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]


def test_scenarios_lists_every_shipped_file_with_its_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from rich.console import Console

    from medpanel.experiments.cli import catalogue

    monkeypatch.chdir(ROOT)
    # A wide console of its own: the module's console took its width when first imported, which in a
    # test process may be before any COLUMNS was set (then names wrap inside their column).
    buf = io.StringIO()
    monkeypatch.setattr(catalogue, "console", Console(file=buf, width=400, color_system=None))
    res = CliRunner().invoke(app, ["scenarios"])
    assert res.exit_code == 0, res.output
    lines = buf.getvalue().splitlines()
    shipped = sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml"))
    for name in shipped:
        row = next(line for line in lines if f" {name} " in line)
        assert "does not load" not in row
        n = len(load_scenario(ROOT / "scenarios" / name).conditions())
        assert f" {n} " in row
    grid = next(line for line in lines if " ablation_2x2.yaml " in line)
    assert "seed paper Table 2A" in grid and "c1r1 55.5" in grid and " 4 " in grid
    assert "Table 5" in next(line for line in lines if " clear_followup.yaml " in line)  # from its description
    assert " - " in next(line for line in lines if " quickstart.yaml " in line)  # no figure: nothing guessed



def test_scenarios_markdown_is_one_row_per_file_with_the_first_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    res = CliRunner().invoke(app, ["scenarios", "--markdown"])
    assert res.exit_code == 0, res.output
    lines = res.output.strip().splitlines()
    assert lines[0].startswith("| scenario | pipeline | conditions |") and lines[1].startswith("|---")
    shipped = sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml"))
    assert len(lines) == 2 + len(shipped)
    row = next(line for line in lines if line.startswith("| `self_assessment.yaml` "))
    # The description's first sentence only: its declared deviation stays in the file and the docs.
    assert row.endswith("| Question-level self-assessment (paper Table 2B). |"), row
    assert "| `panel` | 1 | Table 2B |" in row


def test_first_sentence_stops_at_a_full_stop_before_a_capital() -> None:
    assert first_sentence("One (e.g. two) three. Four five.") == "One (e.g. two) three."
    assert first_sentence("k = 16,\n 3 x 3 turns. deviations follow") == "k = 16, 3 x 3 turns. deviations follow"
    assert first_sentence("") == ""

def test_an_about_block_is_optional_and_checked(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    f.write_text("name: x\nabout: {table: T1, colour: red}\n", encoding="utf-8")
    with pytest.raises(UserError, match="colour"):
        load_scenario(f)


def test_init_writes_a_commented_scenario_that_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["init", "my-study"])
    assert res.exit_code == 0, res.output
    text = (tmp_path / "my-study.yaml").read_text()
    assert text.startswith("# my-study: a medpanel scenario") and "medpanel validate my-study.yaml" in text
    sc = load_scenario(tmp_path / "my-study.yaml")
    assert sc.name == "my-study" and [c.slug for c in sc.conditions()] == ["c0", "c1"]


def test_init_from_a_shipped_scenario_keeps_its_grid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDAGENTSBENCH_DIR", str(tmp_path))
    out = tmp_path / "grid.yaml"
    res = CliRunner().invoke(app, ["init", "grid", "--from", "ablation_2x2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    sc = load_scenario(out)
    assert sc.name == "grid" and sc.pipeline == "panel"
    assert [c.slug for c in sc.conditions()] == [c.slug for c in load_scenario(
        ROOT / "scenarios" / "ablation_2x2.yaml").conditions()]
    assert "# Made from ablation_2x2.yaml" in out.read_text()


def test_init_refuses_to_overwrite_in_one_line_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "medpanel", "init", "mine"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert "exists" in err and "never overwrites" in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert f.read_text() == "name: mine\n"
    res = CliRunner().invoke(app, ["init", "x", "--from", "nope"])
    assert isinstance(res.exception, UserError) and "ablation_2x2" in str(res.exception)


def test_shell_completion_is_typers_own() -> None:
    # Typer detects the shell from the process tree; the test names it (its own documented switch).
    exe = Path(sys.executable).parent / "medpanel"
    env = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"}
    proc = subprocess.run([str(exe), "--show-completion", "bash"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "_medpanel_completion()" in proc.stdout and "_MEDPANEL_COMPLETE=complete_bash" in proc.stdout
