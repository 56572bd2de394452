"""The `benchmark` pipeline's settings (the benchmark context's methods and the seed conditions inside it),
apart from the pipeline so the method flows (`benchmark_flows`) can read them without an import cycle."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from medpanel.agents.roles.exemplars import BUILTIN
from medpanel.methods.baselines.pipeline import BaselineSettings


class BenchmarkSettings(BaselineSettings):
    exemplars: str = BUILTIN
    """`builtin` (the team's own six exemplars) or a JSONL path of a split that is not evaluated."""
    k_shots: int = Field(default=5, ge=1, le=32)
    """few-shot: exemplars shown (the first k of the pool, the same for every question)."""
    knn_k: int = Field(default=3, ge=1, le=32)
    """medprompt: exemplars chosen per question by BM25 similarity to the stem (the benchmark's 3)."""
    medprompt_generations: int = Field(default=3, ge=1, le=16)
    """medprompt: answers generated with the kNN examples (the benchmark's `num_rounds` 3)."""
    medprompt_choices: int = Field(default=3, ge=1, le=16)
    """medprompt: calls that each pick one generated solution (the benchmark's `vote_count` 3)."""
    shuffle_knn_k: int = Field(default=5, ge=1, le=32)
    """medprompt-shuffle: kNN exemplars with their reasoning (Nori et al.'s 5)."""
    shuffles: int = Field(default=5, ge=1, le=64)
    """medprompt-shuffle: ensemble members, each with its own seeded option order (Nori et al.'s 5)."""
    refine_iterations: int = Field(default=3, ge=1, le=10)
    """self-refine: review rounds at most (the benchmark's self_refine-3)."""
    refine_stop_early: bool = True
    """self-refine: stop when the verdict finds the solution correct (as the benchmark does)."""
    refine_verdict: Literal["blind-parser", "review"] = "blind-parser"
    """self-refine: where the stop verdict and the revision's feedback come from. `blind-parser`: as the
    benchmark's code, a parser call that is not shown the review (`self_refine.py` lines 100-105 and
    176), one call more per review; `review`: the review's own verdict and explanation."""
    persona_rounds: int = Field(default=2, ge=1, le=10)
    """multipersona: debate rounds (the benchmark's multipersona-2); spp: collaboration rounds."""
    reply_caps: Literal["benchmark", "model"] = "benchmark"
    """`benchmark`: `max_tokens` per call as the benchmark's code sets it (512 for zero-shot, none for every
    other call); `model`: every call capped at `model.max_tokens`."""
    panel: dict[str, object] = Field(default_factory=dict)
    """The panel's settings for `panel-*` conditions (validated by the panel pipeline)."""
    generalist: dict[str, object] = Field(default_factory=dict)
    """The generalist's settings for `generalist-*` conditions."""
    medagents: dict[str, object] = Field(default_factory=dict)
    """MedAgents' settings (validated by its pipeline), for the `medagents` variant."""
    mdagents: dict[str, object] = Field(default_factory=dict)
    """MDAgents' settings, for the `mdagents` variant."""
    kamac: dict[str, object] = Field(default_factory=dict)
    """KAMAC's settings, for the `kamac` variant."""

    def inner_settings(self, pipeline: str) -> dict[str, object]:
        """The settings block of the seed pipeline `pipeline` runs under (its pipeline validates it)."""
        blocks = {"panel": self.panel, "generalist": self.generalist, "medagents": self.medagents,
                  "mdagents": self.mdagents, "kamac": self.kamac}
        return blocks[pipeline]
