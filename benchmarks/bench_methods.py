"""Benchmark: what each benchmark-context method (the seed's Table 7 rows) costs per question.

    python -m benchmarks.bench_methods [--limit 0] [--workers 2] [--no-seed]

Runs `scenarios/benchmark_context.yaml`'s methods on the packaged sample questions with the scripted
model (replies synthesised from the request, so the control flow is the real one and nothing is
paid) and prints, per method and named variant, the calls requested per question (re-asks and cache
hits included: the price on a backend without a cache), the calls sent (after the run's shared
response cache), and the tokens requested and sent; beside them, the calls per question the
benchmark's code makes (counted by hand from `baselines/MedPrompt/*.py`, its answer-extractor calls
left out as they are in its token logs) and the gpt-4o tokens per question it logged. The seed's
conditions (panel-c1r1, generalist-between-gap, panel-c1r0k1) use the packaged `quickstart` corpus;
`--no-seed` leaves them out. Token counts are the scripted model's estimate (characters / 4), not a
tokeniser's, and its replies are a few words where gpt-4o's CoT averaged 412 completion tokens:
compare calls with calls, and tokens only in their ratios.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from medpanel.agents.model.scripted import ScriptedChatCompletionClient
from medpanel.experiments.run.execution.runner import Runner
from medpanel.experiments.run.scenario.plan import Plan
from medpanel.experiments.run.scenario.scenario import Scenario
from medpanel.experiments.run.sources.datasets import load_dataset
from medpanel.experiments.run.store.store import Store
from medpanel.methods.benchmark.pipeline import METHODS, ORIGINALS, SEED_CONDITIONS
from medpanel.methods.benchmark.tables import GPT4O_ANCHOR, requested_tokens

BENCHMARK_CALLS = {
    # method -> the benchmark code's model calls per question (extractor calls excluded, as in its logs)
    "zero-shot": "1", "few-shot": "1", "cot": "1",
    "cot-sc": "6",             # cot_sc.py lines 187-204: 5 samples + 1 ensemble call
    "multipersona": "7",       # multi_persona.py lines 136-194: 3 roles x 2 rounds + 1 final decision
    "self-refine": "2-7",      # self_refine.py lines 128-207: 1 + up to 3 x (review, revise)
    "medprompt": "6",          # medprompt.py lines 177-236: 3 generations + 3 choosing calls
}


def measure(limit: int, workers: int, seed: bool) -> dict[str, dict[str, float]]:
    variants = [*METHODS, *ORIGINALS, *(SEED_CONDITIONS if seed else ())]
    scenario = Scenario(name="bench-methods", pipeline="benchmark", variants=variants,
                        settings={"temperature": 0.7, "panel": {"corpus": "quickstart"},
                                  "generalist": {"corpus": "quickstart", "k": 4}},
                        dataset={"source": "sample", "limit": limit or None},
                        model={"backend": "scripted", "cache": "run"}, run={"workers": workers})
    questions = load_dataset("sample", None, None, limit or None, 42)
    plan = Plan(scenario=scenario, conditions=scenario.conditions(), questions=questions, repeats=1, shard_size=4)
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner.create(plan, run_dir=Path(tmp) / "run")
        runner.client_factory = lambda spec: ScriptedChatCompletionClient()
        runner.run(install_signals=False)
        store = Store(runner.storage_url, runner.run_dir)
        rows = store.rows()
        store.close()
    out: dict[str, dict[str, float]] = {}
    for slug in variants:
        sel = [r for r in rows if r.condition == slug]
        n = len(sel) or 1
        out[slug] = {"n": len(sel), "requested": sum(r.logical_calls for r in sel) / n,
                     "sent": sum(r.calls for r in sel) / n, "tokens": sum(requested_tokens(r) for r in sel) / n,
                     "sent_tokens": sum(r.tokens for r in sel) / n,
                     "invalid": sum(r.invalid for r in sel), "errors": sum(bool(r.error) for r in sel)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=0, help="questions per sample dataset (0: all)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-seed", action="store_true", help="leave out the seed's panel and generalist conditions")
    args = ap.parse_args()
    res = measure(args.limit, args.workers, not args.no_seed)
    print(f"{'method':<24}{'n':>4}{'calls/q requested':>19}{'calls/q sent':>14}{'tokens/q':>10}"
          f"{'sent tokens/q':>15}{'invalid':>9}{'errors':>8}{'bench calls/q':>15}{'gpt-4o tokens/q':>17}")
    for slug, m in res.items():
        anchor = GPT4O_ANCHOR.get(slug)
        print(f"{slug:<24}{m['n']:>4.0f}{m['requested']:>19.2f}{m['sent']:>14.2f}{m['tokens']:>10.0f}"
              f"{m['sent_tokens']:>15.0f}{m['invalid']:>9.0f}{m['errors']:>8.0f}{BENCHMARK_CALLS.get(slug, '-'):>15}"
              f"{anchor[0] if anchor else '-':>17}")
    print("bench calls/q: the benchmark's code, counted by hand; gpt-4o tokens/q: its logged runs on the 862 "
          "questions (reference_results.csv). Scripted tokens are characters / 4 of few-word replies.")


if __name__ == "__main__":
    main()
