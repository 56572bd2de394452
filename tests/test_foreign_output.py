"""medpanel's output is medpanel's own: no other library's warnings, progress bars or banners, and a
statistic that cannot be computed says so in words.

A real `medpanel run` (a subprocess, its own stdout and stderr) reads a Hugging Face file, so
`datasets` is used, and logs to W&B offline when the `[wandb]` extra is installed. The degenerate
example is a 2x2 grid, five repeats of two questions, written through the store with the answers
below: the GEE fit's robust variance comes out negative (statsmodels' "invalid value encountered in
sqrt"), two conditions agree on every question in some repeats (no discordant pair), and one
condition is right on 80% of every question's repeats (no spread over questions).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from medpanel.agents.types import Question, QuestionResult
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import Plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.store import Store

MEDPANEL = Path(sys.executable).parent / "medpanel"
FOREIGN = ("Warning", "warning:", "wandb:", "Generating train split", "IProgress", "%|", "examples/s", "Traceback")

# correctness[condition][question] over five repeats
ANSWERS = {"c0r0": ["11001", "00111"], "c0r1": ["11101", "11101"], "c1r0": ["00001", "00000"],
           "c1r1": ["11111", "10111"]}


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "PYTHONWARNINGS"))}
    return {**env, "COLUMNS": "200", "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wb")}


def _foreign(text: str) -> list[str]:
    return [line for line in text.splitlines() if any(word in line for word in FOREIGN)]


def _medmcqa(path: Path) -> None:
    datasets = pytest.importorskip("datasets", reason="the [hf] extra is not installed")
    rows = [{"id": f"m-{i}", "question": f"Which mineral {i}?", "opa": "Iron", "opb": "Zinc", "opc": "Copper",
             "opd": "Lead", "cop": i % 4, "choice_type": "single", "exp": "", "subject_name": "Biochemistry",
             "topic_name": "Minerals"} for i in range(4)]
    datasets.Dataset.from_list(rows).to_parquet(str(path))


def test_a_run_prints_only_medpanels_own_lines(tmp_path: Path) -> None:
    _medmcqa(tmp_path / "medmcqa.parquet")
    tracker = "wandb" if _has("wandb") else "null"
    (tmp_path / "s.yaml").write_text(
        "name: quiet\npipeline: generalist\nflags: {c: [0, 1]}\n"
        "dataset: {source: hf, path: medmcqa.parquet, preset: medmcqa}\nmodel: {backend: scripted}\n"
        f"run: {{workers: 1, repeats: 2, tracker: {tracker}}}\n", encoding="utf-8")
    proc = subprocess.run([str(MEDPANEL), "run", "s.yaml", "--run-dir", "run"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    assert not _foreign(proc.stdout), proc.stdout
    assert "Accuracy and cost per question" in proc.stdout and "Done." in proc.stdout
    if tracker == "wandb":
        assert list((tmp_path / "wb" / "wandb").glob("offline-run-*/*.wandb")), "the tracker logged nothing"


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def degenerate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("degenerate")
    scenario = Scenario(name="degenerate", pipeline="generalist", flags={"c": [0, 1], "r": [0, 1]},
                        model={"backend": "scripted"})
    questions = [Question(dataset="d", qid=f"q{i}", text=f"Question {i}?", options={"A": "x", "B": "y"}, gold=("A",))
                 for i in range(2)]
    plan = Plan(scenario=scenario, conditions=scenario.conditions(), questions=questions, repeats=5, shard_size=4)
    runner = Runner.create(plan, run_dir=base / "run")
    store = Store(runner.storage_url, runner.run_dir)
    for cond, per_question in ANSWERS.items():
        for q, answers in zip(questions, per_question, strict=True):
            for rep, right in enumerate(answers):
                result = QuestionResult(condition=cond, dataset=q.dataset, qid=q.qid, repeat=rep,
                                        answer=("A" if right == "1" else "B",), gold=q.gold, correct=right == "1")
                assert store.claim((cond, q.dataset, q.qid, rep), "test")
                store.commit(result, q, "test")
    store.close()
    (runner.run_dir / "status.json").write_text(json.dumps({"state": "complete", "remaining": 0}))
    return runner.run_dir


def test_tables_of_a_degenerate_run_say_why_in_words_and_nothing_else(degenerate: Path, tmp_path: Path) -> None:
    script = ("import json, sys, medpanel\n"
              "from pathlib import Path\nfrom medpanel.experiments.cli.output import print_summary\n"
              "tables = medpanel.load_run(sys.argv[1]).tables()\n"
              "print_summary(Path(sys.argv[1]))\n"
              "print(json.dumps({name: [t.columns, t.rows] for name, t in tables.items()}, default=str))\n")
    proc = subprocess.run([sys.executable, "-c", script, str(degenerate)], capture_output=True, text=True, timeout=300,
                          env=_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr  # statsmodels' RuntimeWarning was here
    summary, _, dumped = proc.stdout.rpartition("\n{")
    tables = json.loads("{" + dumped)
    assert not _foreign(summary), summary
    # the GEE row: a negative robust variance is a note, not a number or a warning
    factorial = next(v for k, v in tables.items() if k.startswith("factorial"))
    notes = " ".join(str(cell) for row in factorial[1] for cell in row)
    assert "no standard error: the robust variance estimate is negative" in notes
    # the paired comparisons: where no question differs, the CI and the verdict say so
    cols, rows = tables["paired_comparisons"]
    line = {c: i for i, c in enumerate(cols)}
    same = [r for r in rows if r[line["b_only"]] == r[line["a_only"]] == 0]
    assert same and all(r[line["95%_CI_pts"]] == "none: no discordant question" and
                        r[line["verdict"]] == "no question differs: nothing to test" for r in same)
    # over every run: c0r1 - c0r0 is +20 points on both questions, a bootstrap with nothing to resample
    cols, rows = tables["paired_comparisons_over_every_run"]
    line = {c: i for i, c in enumerate(cols)}
    (flat,) = [r for r in rows if r[line["contrast"]] == "c0r1 - c0r0"]
    assert flat[line["95%_CI_pts"]] == "none: the same difference on every question"
    cols, rows = tables["repeats_over_every_run"]
    (c0r1,) = [r for r in rows if r[0] == "c0r1"]
    assert c0r1[cols.index("95%_CI_questions")] == "none: the same on every question"
    # the summary: c0r1 is right on 4 of 5 repeats of each question, a bootstrap with nothing to resample
    c0r1 = next(line for line in summary.splitlines() if line.startswith("c0r1 "))
    assert "none: 80% on every question" in c0r1 and "[80.0, 80.0]" not in c0r1


def test_a_notebook_sees_no_widget_notice_from_the_libraries_medpanel_imports(tmp_path: Path) -> None:
    """A Jupyter kernel without ipywidgets, as tqdm detects one (`ipykernel.zmqshell` imported, IPython's
    shell a ZMQ shell): importing optuna or datasets there warns "IProgress not found"."""
    _medmcqa(tmp_path / "medmcqa.parquet")
    (tmp_path / "IPython").mkdir()
    (tmp_path / "IPython" / "__init__.py").write_text(
        "class ZMQInteractiveShell:\n    pass\n\n\ndef get_ipython():\n    return ZMQInteractiveShell()\n")
    (tmp_path / "ipykernel").mkdir()
    (tmp_path / "ipykernel" / "__init__.py").write_text("")
    (tmp_path / "ipykernel" / "zmqshell.py").write_text("")
    (tmp_path / "s.yaml").write_text(
        "name: nb\npipeline: generalist\nflags: {c: [0, 1]}\n"
        "dataset: {source: hf, path: medmcqa.parquet, preset: medmcqa}\nmodel: {backend: scripted}\n"
        "run: {workers: 1}\n", encoding="utf-8")
    script = ("import warnings, ipykernel.zmqshell, IPython, medpanel\n"
              "warnings.simplefilter('always')\n"
              "r = medpanel.run('s.yaml', run_dir='run')\n"
              "assert r.state == 'complete', r\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**_env(tmp_path), "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "IProgress" not in proc.stderr + proc.stdout, proc.stderr
