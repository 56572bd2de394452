"""Where a benchmark-context run departs from MedAgentsBench's own code (`baselines/MedPrompt/*.py`,
fork `xk-huang/medagents-benchmark` @56ca11e), whose logged gpt-4o runs are the report's anchors.

Two kinds of difference, both printed in the report's `protocol:` line:

- **settings** (`CODE_SETTINGS`): a value the benchmark's code fixes, compared with the run's resolved
  setting (a shipped scenario must declare each one it changes, as `name = value`);
- **by design** (`BY_DESIGN`): what no setting removes, stated once per method present in the run.

docs/methods/benchmark.md explains each, with the benchmark's file and lines.
"""

from __future__ import annotations

from collections.abc import Mapping

SINGLE_PIPELINES = ("zero-shot", "few-shot", "cot-sc", "multipersona", "self-refine", "medprompt")
"""Pipelines that are one benchmark method each (`pipeline: medprompt`)."""

CODE_SETTINGS: dict[str, list[tuple[str, object]]] = {
    # method -> (setting, the benchmark code's value); run_experiments_*.sh and each script's argparse
    "few-shot": [("k_shots", 5)],                                  # few_shot.py line 218: train.jsonl[:5]
    "cot-sc": [("n_samples", 5), ("temperature", 0.0)],            # run_experiments_cot_sc.sh; cot_sc.py line 72
    "multipersona": [("persona_rounds", 2)],                       # run_experiments_multi_persona.sh
    "self-refine": [("refine_iterations", 3), ("refine_stop_early", True),  # run_experiments_self_refine.sh
                    ("refine_verdict", "blind-parser")],  # self_refine.py 100-105, 176: the parser sees no review
    "medprompt": [("knn_k", 3), ("medprompt_generations", 3), ("medprompt_choices", 3)],  # medprompt.py 276-284
}
EVERY_METHOD = [("reply_caps", "benchmark")]
"""zero_shot.py lines 88-94 cap at 512; no other call of the benchmark's code sets `max_tokens`."""

COMMON = ("every reply structured (letters constrained to the options) instead of a free reply and a second "
          "extractor call; prompts in medpanel's words and question format; an invalid answer is counted, never "
          "dropped")
BY_DESIGN: dict[str, str] = {
    "few-shot": "exemplars from settings.exemplars (builtin: the team's six), shown with options and the letter, "
                "instead of the dataset's train.jsonl[:5] with the answer text",
    "cot-sc": "each sample its own seed",
    "multipersona": "a role's unparsed reply is shown to the others as \"(no valid reply)\"",
    "self-refine": "a review that cannot be parsed ends the loop; the blind parser call (shown no review, as the "
                   "code's) runs on the run's model and is counted (code: AZURE_PARSE_ANSWER_MODEL, left out of "
                   "its token logs)",
    "medprompt": "kNN by BM25 over the pool's stems (builtin: the team's six) instead of embeddings of the first "
                 "100 train items (whose helper gives every text the first text's vector, medprompt.py line 110, so "
                 "all are equally near and its tie-break picks); each generation its own seed; the choosing "
                 "calls' orders seeded",
    "spp": "a variant the benchmark does not run (Solo Performance Prompting, one conversation)",
    "medprompt-shuffle": "a variant the benchmark does not run (Nori et al.'s choice-shuffle ensemble)",
}


def methods_of(pipeline: str, variants: set[str]) -> list[str]:
    """The benchmark's single-model methods (and their named variants) a run holds."""
    if pipeline in SINGLE_PIPELINES:
        return [pipeline]
    if pipeline != "benchmark":
        return []
    known = ("zero-shot", "few-shot", "cot", "cot-sc", "multipersona", "self-refine", "medprompt", "spp",
             "medprompt-shuffle")
    return [m for m in known if m in variants]


def setting_differences(methods: list[str], settings: Mapping[str, object]) -> list[tuple[str, object, object]]:
    """(settings key, run's value, benchmark code's value) for every fixed value the run changes."""
    want: list[tuple[str, object]] = []
    for m in methods:
        want += CODE_SETTINGS.get(m, [])
    if methods:
        want += EVERY_METHOD
    seen: set[str] = set()
    out: list[tuple[str, object, object]] = []
    for key, code in want:
        if key in seen:
            continue
        seen.add(key)
        value = settings.get(key)
        if value is not None and value != code:
            out.append((f"settings.{key}", value, code))
    return out


def by_design(methods: list[str]) -> str:
    """The differences no setting removes, for the methods in the run; "" when it has none of them."""
    if not methods:
        return ""
    parts = [COMMON] + [f"{m}: {BY_DESIGN[m]}" for m in methods if m in BY_DESIGN]
    return "; ".join(parts)
