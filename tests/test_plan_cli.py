"""`medpanel plan`: questions per comparison, the benchmark-size warning, pilot costs, bad input."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import medpanel
from medpanel.experiments.cli.main import main

SCENARIO = """\
name: plan-2x2
pipeline: panel
flags: {c: [0, 1], r: [0, 1]}
settings: {rounds: 1, turns_per_round: 1}
dataset: {source: sample}
model: {backend: scripted}
run: {workers: 3, prices: {scripted: {input: 1.0, output: 2.0}}}
"""


def invoke(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(argv)
            rc = 0
        except SystemExit as exc:
            rc = int(exc.code or 0)
    return rc, out.getvalue(), err.getvalue()


def test_plan_without_pilot_states_assumptions_and_warns(tmp_path: Path) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_text(SCENARIO)
    rc, out, err = invoke(["plan", str(sc), "--effect", "3", "--accuracy", "0.45", "--phi", "0.5"])
    assert rc == 0, err
    # p_d = 2 x 0.45 x 0.55 x (1 - 0.5) = 0.2475 for every pair; a main effect's E[d^2] = p_d / 2.
    assert "discordance p_d = 0.247" in out or "discordance p_d = 0.248" in out
    main_c = next(ln.split() for ln in out.splitlines() if ln.startswith("  c main effect"))
    pair = next(ln.split() for ln in out.splitlines() if ln.startswith("  c1r0 - c0r0"))
    assert main_c[3:5] == ["contrast", "0.124"] and pair[3:5] == ["pair", "0.248"]
    # The 12 built-in questions cannot resolve 3 points: every comparison warns and says what they can.
    assert out.count("warning:") == 7
    assert "12 questions cannot resolve 3 points" in out and "no pilot" in out


def test_plan_with_pilot_prices_the_full_scenario(tmp_path: Path) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_text(SCENARIO)
    res = medpanel.run(sc, run_dir=tmp_path / "pilot", limit=None, workers=1)
    assert res.state == "complete"
    run = medpanel.load_run(res.run_dir)
    rc, out, err = invoke(["plan", str(sc), "--pilot", str(res.run_dir)])
    assert rc == 0, err
    assert "rates from pilot" in out
    # The pilot answered every question of the scenario, so the projection is its own spend: calls sent.
    sent = sum(r.calls for r in run.rows)
    total = next(ln for ln in out.splitlines() if ln.strip().startswith("cost total"))
    assert f"{sent:,} calls" in total
    assert "wall time at 3 workers" in out


def test_plan_bad_input_is_one_line(tmp_path: Path) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_text(SCENARIO)
    rc, _out, err = invoke(["plan", str(sc), "--power", "1.5"])
    assert rc == 2 and err.count("\n") == 1 and "--power" in err
    rc, _out, err = invoke(["plan", str(sc), "--pilot", str(tmp_path / "nope")])
    assert rc == 2 and err.count("\n") == 1 and "nope" in err
