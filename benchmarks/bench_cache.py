"""Benchmark: model calls of the c/r 2x2 grid with the shared response cache against without it.

    python -m benchmarks.bench_cache [--questions 20] [--weakness 0.6] [--need 0.15]

In a 2x2 grid the four conditions share their first turn, and two conditions stay identical until
the flag that separates them first changes the discussion (a critique with a material weakness, or
an actual recruitment). At temperature 0 identical requests are answered once. A scripted model
answers with fixed rates: the Challenger finds a material weakness with probability `--weakness`
and each agent flags a missing specialty with probability `--need` (the paper reports recruitment
on 24-41% of questions). Printed: calls per question for each condition, the grid's total with and
without the cache, and the ratio (target <= 0.85).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from medpanel.agents.model.scripted import ScriptedChatCompletionClient, ScriptedRequest, synthesize
from medpanel.agents.types import Question
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import Plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.store.store import Store
from medpanel.methods.panel.roles.challenger import Critique
from medpanel.methods.panel.roles.recruiter import RecruitCheck
from medpanel.methods.panel.roles.selector import TeamChoice

TARGET = 0.85
ROLES = ["Cardiologist", "Nephrologist", "Neurologist", "Endocrinologist", "Infectious disease specialist",
         "Pharmacologist", "Radiologist", "Surgeon"]


def _u(seed: str) -> float:
    return int(hashlib.sha256(seed.encode()).hexdigest()[:12], 16) / 16**12


def responder(weakness: float, need: float) -> Any:
    def respond(r: ScriptedRequest) -> Any:
        seed = json.dumps(r.messages, sort_keys=True)
        if r.model is Critique:
            yes = _u(seed) < weakness
            return {"material_weakness": yes, "gap_type": "missing_differential" if yes else "none",
                    "challenge": f"Reconsider the differential ({_u(seed + 'c'):.3f})." if yes else ""}
        if r.model is RecruitCheck:
            yes = _u(seed) < need
            return {"needed": yes, "specialty": ROLES[int(_u(seed + "s") * len(ROLES))] if yes else "", "reason": ""}
        if r.model is TeamChoice:
            i = int(_u(seed) * len(ROLES))
            picks = [ROLES[i % len(ROLES)], ROLES[(i + 1) % len(ROLES)], ROLES[(i + 2) % len(ROLES)]]
            return {"specialists": [{"role": p, "expertise": "x"} for p in picks]}
        assert r.model is not None
        return synthesize(r.model, seed)

    return respond


def grid_calls(questions: int, weakness: float, need: float, cache: str, workers: int) -> dict[str, float]:
    scenario = Scenario(name="bench-cache", pipeline="panel", flags={"c": [0, 1], "r": [0, 1]},
                        model={"backend": "scripted", "cache": cache}, run={"workers": workers})
    qs = [Question(dataset="bench", qid=str(i), text=f"Bench question {i}: which option?",
                   options={"A": "a", "B": "b", "C": "c", "D": "d"}, gold=("A",)) for i in range(questions)]
    plan = Plan(scenario=scenario, conditions=scenario.conditions(), questions=qs, repeats=1, shard_size=4)
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner.create(plan, run_dir=Path(tmp) / "run")
        runner.client_factory = lambda spec: ScriptedChatCompletionClient(responder(weakness, need))
        runner.run(install_signals=False)
        store = Store(runner.storage_url, runner.run_dir)
        rows = store.rows()
        store.close()
    out: dict[str, float] = {}
    for slug in ("c0r0", "c0r1", "c1r0", "c1r1"):
        sel = [r for r in rows if r.condition == slug]
        out[slug] = sum(r.calls for r in sel) / len(sel)
    out["grid"] = sum(r.calls for r in rows) / questions
    out["recruited_q"] = sum(1 for r in rows if r.condition == "c1r1" and r.summary.get("recruited")) / questions
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument("--weakness", type=float, default=0.6)
    ap.add_argument("--need", type=float, default=0.15)
    ap.add_argument("--workers", type=int, default=4)
    args = ap.parse_args()
    off = grid_calls(args.questions, args.weakness, args.need, "off", args.workers)
    on = grid_calls(args.questions, args.weakness, args.need, "run", args.workers)
    print(f"2x2 grid, {args.questions} questions, Challenger weakness rate {args.weakness}, "
          f"per-agent recruitment need {args.need} (c1r1 recruited on {100 * on['recruited_q']:.0f}% of questions)")
    print(f"{'condition':<10}{'calls/q no cache':>18}{'calls/q cache':>15}")
    for slug in ("c0r0", "c0r1", "c1r0", "c1r1", "grid"):
        print(f"{slug:<10}{off[slug]:>18.2f}{on[slug]:>15.2f}")
    ratio = on["grid"] / off["grid"]
    print(f"grid calls with cache / four independent runs = {ratio:.3f} (target <= {TARGET}); "
          f"calls saved per question = {off['grid'] - on['grid']:.1f}")


if __name__ == "__main__":
    main()
