"""The short summary `medpanel run` ends with, checked against hand-computed counts."""

from __future__ import annotations

import io
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest
from medpanel.experiments.analysis.run_summary import run_summary
from medpanel.experiments.cli import output as cli
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import make_plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.rows import Row
from tests.run_records import run_record

ROOT = Path(__file__).resolve().parents[1]
Z = 1.959963984540054  # the normal quantile of a 95% interval


def wilson(k: int, n: int) -> tuple[float, float]:
    """The Wilson score interval, written out, in points."""
    centre = (k + Z * Z / 2) / (n + Z * Z)
    half = Z / (n + Z * Z) * math.sqrt(k * (n - k) / n + Z * Z / 4)
    return 100 * (centre - half), 100 * (centre + half)


def row(cond: str, qid: int, correct: bool, *, calls: int, tokens: int, usd: float, invalid: bool = False,
        error: str | None = None, rep: int = 0) -> Row:
    return Row(condition=cond, dataset="d", qid=str(qid), repeat=rep, answer="" if invalid or error else "A",
               gold="A", correct=correct, invalid=invalid, error=error, error_kind="timeout" if error else None,
               calls=calls, logical_calls=calls, tokens=tokens, latency_s=1.0, summary={}, transcript="t.json",
               cost_usd=usd)


FLAGS = {"c0r0": {"c": 0, "r": 0}, "c0r1": {"c": 0, "r": 1}, "c1r0": {"c": 1, "r": 0}, "c1r1": {"c": 1, "r": 1}}
META = {"conditions": [{"slug": s, "flags": f} for s, f in FLAGS.items()],
        "scenario": {"run": {"prices": {"m": {"input": 1.0, "output": 1.0}}}}}


def two_by_two() -> list[Row]:
    """20 questions; right sets chosen so every discordance (hence McNemar p) is known by hand."""
    right = {"c0r0": set(range(1, 5)), "c0r1": set(range(1, 6)), "c1r0": set(range(1, 17)),
             "c1r1": set(range(1, 17))}
    cost = {"c0r0": (2, 100, 0.01), "c0r1": (4, 300, 0.03), "c1r0": (3, 200, 0.02), "c1r1": (5, 500, 0.05)}
    rows = []
    for cond, ok in right.items():
        calls, tokens, usd = cost[cond]
        for q in range(1, 21):
            invalid = cond == "c0r0" and q == 17
            error = "timeout: no reply" if (cond, q) in {("c0r0", 18), ("c1r1", 20)} else None
            rows.append(row(cond, q, q in ok, calls=calls, tokens=tokens + q, usd=usd, invalid=invalid, error=error))
    return rows


def test_accuracy_ci_invalid_errors_and_cost_match_hand_counts() -> None:
    s = run_summary(two_by_two(), run_record(META), n_boot=2000)
    assert s.accuracy.columns == ["condition", "correct", "acc_%", "95%_CI", "invalid", "errors", "sent/q",
                                  "tokens/q", "usd/q"]
    by = {r[0]: r for r in s.accuracy.rows}
    assert list(by) == ["c0r0", "c0r1", "c1r0", "c1r1"]
    lo, hi = wilson(4, 20)
    # tokens per question = the base + the mean of 1..20 (10.5); usd = the per-row price
    assert by["c0r0"] == ["c0r0", "4/20", "20.0", f"[{lo:.1f}, {hi:.1f}]", 1, 1, "2.0", "110", "0.0100"]
    lo, hi = wilson(16, 20)
    assert by["c1r1"] == ["c1r1", "16/20", "80.0", f"[{lo:.1f}, {hi:.1f}]", 0, 1, "5.0", "510", "0.0500"]
    assert by["c0r1"][1:4] == ["5/20", "25.0", "[{:.1f}, {:.1f}]".format(*wilson(5, 20))]
    assert by["c1r0"][6:] == ["3.0", "210", "0.0200"]


def test_verdicts_carry_holm_adjusted_mcnemar_p() -> None:
    s = run_summary(two_by_two(), run_record(META), n_boot=2000)
    assert s.verdicts is not None and s.more_verdicts == 0
    assert s.verdicts.columns == ["a", "b", "diff_pts", "95%_CI_pts", "p_holm", "verdict"]
    got = {(r[0], r[1]): r for r in s.verdicts.rows}
    # Exact McNemar p: c0r0 -> c1r0 12 b-only of 12 discordant: 2 / 2^12; c0r1 -> c1r1 11 of 11: 2 / 2^11;
    # the other two pairs: 1 discordant question, or none: p = 1. Holm over the four: sorted p times 4, 3, 2, 1.
    p1, p4 = 2 / 2**12, 2 / 2**11
    holm = {("c0r0", "c1r0"): 4 * p1, ("c0r1", "c1r1"): 3 * p4, ("c0r0", "c0r1"): 1.0, ("c1r0", "c1r1"): 1.0}
    assert set(got) == set(holm)
    for pair, p in holm.items():
        assert got[pair][4] == f"{p:.3f}", pair
    assert got[("c0r0", "c1r0")][2] == "+60.0" and got[("c0r0", "c1r0")][5] == "b better"
    assert got[("c0r1", "c1r1")][2] == "+55.0" and got[("c0r1", "c1r1")][5] == "b better"
    assert got[("c0r0", "c0r1")][2] == "+5.0" and got[("c0r0", "c0r1")][5] == "no detectable difference"
    # no discordant question: the CI and the verdict say so instead of [0.0, 0.0] and p = 1
    assert got[("c1r0", "c1r1")][2:4] == ["+0.0", "none: no discordant question"]
    assert got[("c1r0", "c1r1")][5] == "no question differs: nothing to test"


def test_unpriced_runs_show_no_dollars() -> None:
    rows = [row("c0", 1, True, calls=1, tokens=10, usd=0.0), row("c0", 2, False, calls=1, tokens=10, usd=0.0)]
    s = run_summary(rows, run_record({"conditions": [{"slug": "c0", "flags": {"c": 0}}], "scenario": {}}), n_boot=100)
    assert s.accuracy.rows[0][-1] == "-" and s.verdicts is None


def test_repeats_resample_questions_not_answers() -> None:
    # q1 right in all three repeats, q2 wrong in all three: the six answers are two observations.
    rows = [row("c0", q, q == 1, calls=1, tokens=1, usd=0.0, rep=rep) for q in (1, 2) for rep in range(3)]
    s = run_summary(rows, run_record({"conditions": [{"slug": "c0", "flags": {"c": 0}}]}), n_boot=2000)
    # Resampling two questions gives 0, 50 or 100 %; each end has probability 1/4 > 2.5 %. Wilson over
    # the six answers would claim [18.8, 81.2].
    assert s.accuracy.rows[0][1:4] == ["3/6", "50.0", "[0.0, 100.0]"]
    assert "[{:.1f}, {:.1f}]".format(*wilson(3, 6)) == "[18.8, 81.2]"


def _questions(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"realidx": f"s{i}", "question": f"Summary question {i}: next step?",
                                        "options": {"A": "ECG", "B": "MRI", "C": "Discharge", "D": "Wait"},
                                        "answer_idx": "A"}) + "\n" for i in range(1, 6)), encoding="utf-8")
    return path


def _responder(r: ScriptedRequest) -> dict[str, Any]:
    """The generalist answers B (wrong) on questions 1-2, A on 3-4 and nothing valid on 5; the
    Challenger always finds a weakness; the reconsidered answer is A. So c0 (no Challenger) gets
    2 of 5 right with 1 invalid, and c1 gets 5 of 5."""
    if r.tag.role == "challenger":
        return {"material_weakness": True, "gap_type": "missing_differential", "challenge": "Recheck the ECG."}
    if r.tag.step.startswith("reconsider"):
        return {"reasoning": "rechecked", "answer": "A"}
    q = int(re.search(r"Summary question (\d)", json.dumps(r.messages)).group(1))  # type: ignore[union-attr]
    return {"reasoning": "first look", "answer": "B" if q <= 2 else "A" if q <= 4 else "Z"}


def _scripted_run(tmp_path: Path) -> Runner:
    scenario = Scenario.model_validate({
        "name": "summary", "pipeline": "generalist", "flags": {"c": [0, 1]},
        "dataset": {"source": "jsonl", "path": str(_questions(tmp_path / "q.jsonl", 5))},
        "model": {"backend": "scripted", "cache": "off"},
        "run": {"workers": 1, "prices": {"scripted": {"input": 1e6, "output": 1e6}}},  # $1 a token
    })
    runner = Runner.create(make_plan(scenario, base_dir=tmp_path), run_dir=Path("runs/summary-20261201-120000"))
    client = ScriptedChatCompletionClient(_responder)
    runner.client_factory = lambda spec: client
    assert runner.run(install_signals=False)["state"] == "complete"
    return runner


@pytest.mark.parametrize("width", [80, 160])
def test_printed_summary_of_a_scripted_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    monkeypatch.chdir(tmp_path)  # a relative run directory of the usual length, as medpanel run makes
    runner = _scripted_run(tmp_path)
    buf = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=buf, width=width, color_system=None))
    cli.print_summary(runner.run_dir, n_boot=2000)
    lines = buf.getvalue().splitlines()
    assert len(lines) <= 25 and max(len(x) for x in lines) <= width
    cells = {x.split()[0]: x.split() for x in lines if re.match(r"c[01]\s+\d+/\d+\s", x)}
    # c0: calls = the initial answer (one re-ask on question 5): 6 / 5; c1 adds the critique, its
    # rewrite ("Recheck the ECG." names option A, the answer screen re-asks it and redacts the rewrite)
    # and the reconsideration on every question: 21 / 5. Each dollar is a token.
    lo0, hi0 = wilson(2, 5)
    assert cells["c0"][:7] == ["c0", "2/5", "40.0", f"[{lo0:.1f},", f"{hi0:.1f}]", "1", "0"]
    assert cells["c0"][7] == "1.2"
    lo1, hi1 = wilson(5, 5)
    assert cells["c1"][:8] == ["c1", "5/5", "100.0", f"[{lo1:.1f},", f"{hi1:.1f}]", "0", "0", "4.2"]
    protocol = " ".join(" ".join(lines).split())  # the protocol line, wrapped at the console's width
    assert "Challenger critiques screened for a named answer: c1 5/5 questions (100.0%, 5 critiques)" in protocol
    assert "c0 0/" not in protocol  # a condition without a screened critique is not listed
    for c in ("c0", "c1"):
        assert float(cells[c][9]) == pytest.approx(float(cells[c][8]), abs=1.0)  # usd/q = tokens/q at $1 a token
    # 3 discordant questions, all c1's: exact McNemar p = 2 / 2^3, one comparison so Holm leaves it
    verdict = next(x for x in lines if x.startswith("c0 ") and "c1" in x.split()[1])
    assert verdict.split()[:3] == ["c0", "c1", "+60.0"] and "0.250" in verdict
    assert verdict.rstrip().endswith("no detectable difference")
    assert f"Every table: medpanel report {runner.run_dir}" in lines
    assert f"The viewer:  medpanel view {runner.run_dir}" in lines


def _visual_lines(text: str, width: int) -> int:
    """Lines a terminal of `width` shows (a soft-wrapped command line takes several)."""
    return sum(max(1, math.ceil(len(x) / width)) for x in text.splitlines())


@pytest.mark.parametrize("columns", [80, 160])
def test_the_2x2_run_ends_within_25_lines(tmp_path: Path, columns: int) -> None:
    run_dir = Path("runs") / "ablation-2x2-20261201-120000"  # a run directory of the usual length
    env = {**os.environ, "COLUMNS": str(columns)}
    proc = subprocess.run([sys.executable, "-m", "medpanel", "run", str(ROOT / "scenarios/ablation_2x2.yaml"),
                           "--set", "model.backend=scripted", "--set", "dataset={source: sample, limit: 1}",
                           "--run-dir", str(run_dir), "--quiet"], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    end = out[out.index("scenario ablation-2x2"):]  # what follows the run: the summary
    assert _visual_lines(end, columns) <= 25, end
    assert max(len(x) for x in end.splitlines()) <= columns
    for cond in ("c0r0", "c0r1", "c1r0", "c1r1"):
        assert re.search(rf"^{cond}\s+\d+/\d+\s", end, re.M), cond
    assert len(re.findall(r"^c\dr\d\s+c\dr\d\s+[+-]\d", end, re.M)) == 4  # the scenario's four comparisons
    assert f"medpanel report {run_dir}" in end and f"medpanel view {run_dir}" in end
    assert "Answer transitions" not in end and "Cost ledger" not in end  # those are for medpanel report
