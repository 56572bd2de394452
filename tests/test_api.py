"""The Python face (`medpanel.run`, `medpanel.load_run`) and a researcher's own pipeline, run from a
module outside the package: by `module:Class` through the real CLI, and by entry point."""

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
    assert list(run.tables())[:3] == ["accuracy_per_condition_x_dataset", "cost_per_question", "accuracy_and_compute"]
    assert [t.title for t in run.tables().values()][:3] == ["Accuracy per condition x dataset", "Cost per question",
                                                            "Accuracy and compute"]
    assert [r["condition"] for r in run.records()] == ["c0", "c0", "c1", "c1"]


def test_to_pandas_is_tidy_and_calls_has_one_row_per_model_call(tmp_path: Path) -> None:
    pytest.importorskip("pandas")  # the [pandas] extra (.ci/run installs it)
    result = medpanel.run(ROOT / "scenarios" / "quickstart.yaml", model=SCRIPTED, limit=1, run_dir=tmp_path / "run")
    run = result.load()
    df = run.to_pandas()
    assert len(df) == 4 and list(df[["condition", "qid", "repeat"]].itertuples(index=False, name=None)) == sorted(
        (r.condition, r.qid, r.repeat) for r in run.rows)
    assert {"condition", "qid", "correct", "tokens", "flag_c", "summary_challenged"} <= set(df.columns)
    assert not any("." in c for c in df.columns)
    assert all(not isinstance(v, list | dict | tuple) for v in df.to_numpy().ravel())  # every cell a scalar
    assert df.set_index("condition")["flag_c"].to_dict() == {"c0": 0, "c1": 1}
    assert df.groupby("condition")["summary_challenged"].all().to_dict() == {"c0": False, "c1": True}
    calls = run.calls()
    expected = [(t.condition, t.question.qid, e.agent, e.step) for t in run.transcripts() for e in t.events
                if e.kind == "call"]
    assert list(calls[["condition", "qid", "agent", "step"]].itertuples(index=False, name=None)) == expected
    assert len(calls) > len(df)  # the Challenger's condition calls more than once per question
    assert calls.groupby(["condition", "qid"])["call"].max().min() >= 0
    assert all(not isinstance(v, list | dict | tuple) for v in calls.to_numpy().ravel())


def test_tables_show_in_a_notebook_and_become_frames(tmp_path: Path) -> None:
    pytest.importorskip("pandas")
    result = medpanel.run(ROOT / "scenarios" / "quickstart.yaml", model=SCRIPTED, limit=1, run_dir=tmp_path / "run")
    run = result.load()
    table = run.tables()["accuracy_per_condition_x_dataset"]
    frame = table.to_pandas()
    assert list(frame.columns) == table.columns and frame.values.tolist() == table.rows
    assert frame.attrs["title"] == table.title
    html = table._repr_html_()
    assert html.startswith("<table><caption><b>Accuracy per condition x dataset</b>")
    assert html.count("<tr>") == len(table.rows) + 1
    from medpanel.agents.tables import Table

    assert "&lt;script&gt;" in Table("t", ["a"], [["<script>"]])._repr_html_()  # a cell is text, never markup
    text = repr(run)
    assert text == f"<Run {str(run.run_dir)!r}: generalist, 2 conditions, 4 of 4 pairs done, complete>"


def test_errors_name_the_argument_and_the_call_not_cli_flags(tmp_path: Path) -> None:
    quick = ROOT / "scenarios" / "quickstart.yaml"
    part = medpanel.run(quick, model=SCRIPTED, limit=1, run_dir=tmp_path / "run", max_calls=1)
    assert part.state == "stopped" and part.reason is not None
    assert "max_calls" in part.reason and "--" not in part.reason
    with pytest.raises(UserError) as err:
        medpanel.run(quick, model=SCRIPTED, limit=1, run_dir=tmp_path / "run")
    msg = str(err.value)
    assert err.value.field == "run_dir" and f"medpanel.resume({str(tmp_path / 'run')!r})" in msg
    assert "--" not in msg and "if_exists='resume'" in msg
    with pytest.raises(UserError) as err:
        medpanel.resume(tmp_path / "nothing")
    assert err.value.field == "run_dir" and "RUN_DIR" not in str(err.value)
    with pytest.raises(UserError, match="if_exists"):
        medpanel.run(quick, model=SCRIPTED, run_dir=tmp_path / "run", if_exists="overwrite")  # type: ignore[arg-type]


def test_if_exists_resume_goes_on_and_new_starts_beside(tmp_path: Path) -> None:
    quick = ROOT / "scenarios" / "quickstart.yaml"
    target = tmp_path / "run"
    part = medpanel.run(quick, model=SCRIPTED, limit=1, run_dir=target, max_calls=1)
    assert part.state == "stopped" and part.remaining > 0
    done = medpanel.run(quick, model=SCRIPTED, limit=1, run_dir=target, if_exists="resume")
    assert done.complete and done.run_dir == target and done.remaining == 0
    rows = {(r.condition, r.qid) for r in medpanel.load_run(target).rows}
    again = medpanel.run(quick, model=SCRIPTED, limit=1, run_dir=target, if_exists="resume")
    assert again.complete and {(r.condition, r.qid) for r in medpanel.load_run(target).rows} == rows
    with pytest.raises(UserError) as err:
        medpanel.run(quick, model=SCRIPTED, limit=2, run_dir=target, if_exists="resume")
    assert "dataset.limit differs" in str(err.value) and "if_exists='new'" in str(err.value)
    fresh = medpanel.run(quick, model=SCRIPTED, limit=2, run_dir=target, if_exists="new")
    assert fresh.run_dir == tmp_path / "run-2" and fresh.complete and fresh.pairs == 8


NOTEBOOK_SECTION = "## In a notebook"


def _notebook_cells() -> list[str]:
    doc = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    section = doc[doc.index(NOTEBOOK_SECTION):]
    cells, pos = [], 0
    while (start := section.find("```python\n", pos)) != -1:
        start += len("```python\n")
        end = section.index("```\n", start)
        cells.append(section[start:end])
        pos = end + 4
    return cells


def test_the_docs_notebook_example_runs_as_a_notebook_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pandas")
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = _notebook_cells()
    assert len(cells) >= 5 and "if_exists=" in cells[0]
    (tmp_path / "scenarios").mkdir()
    shutil.copy(ROOT / "scenarios" / "quickstart.yaml", tmp_path / "scenarios" / "quickstart.yaml")
    # A kernel of this interpreter (where medpanel is installed), whatever kernels the machine has.
    spec = tmp_path / "jupyter" / "kernels" / "medpanel-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "medpanel test", "language": "python"}), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(nb, kernel_name="medpanel-test", timeout=300,
                                     resources={"metadata": {"path": str(tmp_path)}})
    outputs = []
    with client.setup_kernel():
        for _ in range(2):  # run every cell, then run them all again in the same kernel
            for i, cell in enumerate(nb.cells):
                client.execute_cell(cell, i)  # raises CellExecutionError on any error
            # what each cell showed (its value), not what it logged on the way
            outputs.append([next((o["data"] for o in c.outputs if o.output_type == "execute_result"), {})
                            for c in nb.cells])
    first, second = outputs
    assert "state='complete'" in first[0]["text/plain"] and "state='complete'" in second[0]["text/plain"]
    assert first[1]["text/plain"].startswith("<Run ") and "8 of 8 pairs done" in first[1]["text/plain"]
    assert "'accuracy_per_condition_x_dataset'" in first[2]["text/plain"]
    assert first[3]["text/html"].startswith("<table><caption>")
    assert first[4] == second[4] and first[5] == second[5]  # the same run read again, not a second one
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["notebook-demo"]


def test_to_pandas_names_the_extra_when_pandas_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = medpanel.run(ROOT / "scenarios" / "quickstart.yaml", model=SCRIPTED, limit=1, flags={"c": [0]},
                          run_dir=tmp_path / "run")
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install 'medpanel\[pandas\]'"):
        result.load().to_pandas()


def test_an_unknown_override_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown override 'rounds'"):
        medpanel.run(ROOT / "scenarios" / "quickstart.yaml", rounds=1)


def test_every_session_option_of_the_cli_is_a_keyword_of_run_and_resume(tmp_path: Path) -> None:
    from medpanel.experiments.run.scenario.runspec import SESSION_OPTIONS

    result = medpanel.run(ROOT / "scenarios" / "quickstart.yaml", model=SCRIPTED, limit=1, run_dir=tmp_path / "run",
                          tokens_per_minute=100_000, processes=1, max_wall_s=600)
    assert result.complete and result.pairs == 4
    with pytest.raises(UserError, match="unknown option 'rounds'") as err:
        medpanel.resume(result.run_dir, rounds=1)
    assert all(key in str(err.value) for key in SESSION_OPTIONS)


def test_a_client_factory_with_child_processes_is_refused_before_any_call(tmp_path: Path) -> None:
    calls: list[object] = []
    with pytest.raises(UserError, match=r"run\.processes.*client_factory.*processes: 1"):
        medpanel.run(ROOT / "scenarios" / "quickstart.yaml", model=SCRIPTED, limit=1, run_dir=tmp_path / "run",
                     processes=2, client_factory=calls.append)
    assert calls == []


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
    plan = medpanel.load_run(result.run_dir).record.plan
    assert plan is not None and plan.conditions["d1"]["advocate"] is True


def test_the_docs_show_the_example_that_runs() -> None:
    section = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    start = section.index("```python\n") + len("```python\n")
    shown = section[start:section.index("```\n", start)]
    module = EXAMPLE.read_text(encoding="utf-8")
    code = module[module.index("import medpanel as mp"):]
    assert shown == code
    body = code[code.index("class AdvocatePlan"):].strip().splitlines()
    assert len(body) <= 35, len(body)
