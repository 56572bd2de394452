"""The Python face (`medpanel.run`, `medpanel.load_run`) and a researcher's own pipeline, run from a
module outside the package: by `module:Class` through the real CLI, and by entry point (issue 14)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import medpanel
from medpanel.experiments.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "devils_advocate.py"
SCRIPTED = {"backend": "scripted"}


def test_run_and_load_run_from_python(tmp_path: Path) -> None:
    result = medpanel.run(ROOT / "scenarios" / "quickstart.yaml", model=SCRIPTED, limit=1, workers=2,
                          run_dir=tmp_path / "run")
    assert result.complete and result.pairs == 4 and result.remaining == 0 and result.errors == 0
    run = medpanel.load_run(result.run_dir)
    assert run.record.format_version == 1 and run.record.pipeline == "generalist"
    assert run.conditions == ["c0", "c1"] and len(run.rows) == 4
    transcripts = list(run.transcripts())
    assert [t.condition for t in transcripts] == ["c0", "c0", "c1", "c1"]
    assert all(t.events and t.events[0].kind == "call" for t in transcripts)
    assert [t.title for t in run.tables()][:3] == ["Accuracy per condition x dataset", "Cost per question",
                                                   "Accuracy and compute"]
    assert [r["condition"] for r in run.records()] == ["c0", "c0", "c1", "c1"]


def test_to_pandas_gives_the_exports_records(tmp_path: Path) -> None:
    pytest.importorskip("pandas")  # the [pandas] extra (.ci/run installs it)
    result = medpanel.run(ROOT / "scenarios" / "quickstart.yaml", model=SCRIPTED, limit=1, run_dir=tmp_path / "run")
    df = result.load().to_pandas()
    assert len(df) == 4 and {"condition", "qid", "correct", "summary.challenged"} <= set(df.columns)
    assert sorted(df["condition"].unique()) == ["c0", "c1"]


def test_to_pandas_names_the_extra_when_pandas_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = medpanel.run(ROOT / "scenarios" / "quickstart.yaml", model=SCRIPTED, limit=1, flags={"c": [0]},
                          run_dir=tmp_path / "run")
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install 'medpanel\[pandas\]'"):
        result.load().to_pandas()


def test_an_unknown_override_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown override 'rounds'"):
        medpanel.run(ROOT / "scenarios" / "quickstart.yaml", rounds=1)


def _scenario(path: Path, pipeline: str) -> Path:
    path.write_text(f"name: advocate\npipeline: {pipeline}\nflags: {{d: [0, 1]}}\n"
                    "dataset: {source: sample, subsets: [medqa-style], limit: 2}\nmodel: {backend: scripted}\n"
                    "run: {workers: 2}\n", encoding="utf-8")
    return path


def test_a_pipeline_from_a_module_outside_the_package_runs_through_the_cli(tmp_path: Path) -> None:
    methods = tmp_path / "mymethods"
    methods.mkdir()
    shutil.copy(EXAMPLE, methods / "devils_advocate.py")  # the README's example, imported from elsewhere
    scenario = _scenario(tmp_path / "advocate.yaml", "devils_advocate:DevilsAdvocate")
    env = {**os.environ, "PYTHONPATH": str(methods)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "medpanel", *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=300)

    checked = cli("validate", str(scenario))
    assert checked.returncode == 0, checked.stderr
    assert "pipeline devils_advocate:DevilsAdvocate" in checked.stdout and "conditions (2): d0, d1" in checked.stdout
    done = cli("run", str(scenario), "--run-dir", "run", "--quiet")
    assert done.returncode == 0, done.stdout + done.stderr
    meta = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert meta["plan"]["pipeline"] == "devils_advocate:DevilsAdvocate"
    assert {slug: p["advocate"] for slug, p in meta["plan"]["conditions"].items()} == {"d0": False, "d1": True}
    run = medpanel.load_run(tmp_path / "run")
    assert len(run.rows) == 4 and not any(r.error for r in run.rows)
    steps = {t.condition: {e.step for e in t.events} for t in run.transcripts()}
    assert "argue" in steps["d1"] and "argue" not in steps["d0"]
    assert all("changed" in r.summary and r.summary["format_version"] == 1 for r in run.rows)
    # without the module on the path the scenario names what cannot be imported, in one line
    missing = subprocess.run([sys.executable, "-m", "medpanel", "validate", str(scenario)], capture_output=True,
                             text=True, cwd=tmp_path, timeout=300,
                             env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    assert "cannot import the pipeline 'devils_advocate:DevilsAdvocate'" in missing.stderr


def test_a_pipeline_from_an_installed_packages_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(EXAMPLE, tmp_path / "devils_advocate.py")
    dist = tmp_path / "advocates-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: advocates\nVersion: 0.1\n", encoding="utf-8")
    (dist / "entry_points.txt").write_text("[medpanel.pipelines]\nadvocate = devils_advocate:DevilsAdvocate\n",
                                           encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = medpanel.run(_scenario(tmp_path / "ep.yaml", "advocate"), run_dir=tmp_path / "run")
    sys.modules.pop("devils_advocate", None)
    assert result.complete and result.pairs == 4
    assert medpanel.load_run(result.run_dir).record.plan["conditions"]["d1"]["advocate"] is True  # type: ignore[index]


def test_the_docs_show_the_example_that_runs() -> None:
    section = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    start = section.index("```python\n") + len("```python\n")
    shown = section[start:section.index("```\n", start)]
    module = EXAMPLE.read_text(encoding="utf-8")
    code = module[module.index("import medpanel as mp"):]
    assert shown == code
    body = code[code.index("class AdvocatePlan"):].strip().splitlines()
    assert len(body) <= 35, len(body)
