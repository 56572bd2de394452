"""The benchmark's single-model methods as the `medpanel.pipelines` entry points name them: each a variant
of `benchmark` and a pipeline of its own (one factory each, as an entry point needs). `zero-shot` sends
`direct`'s prompt; `cot-sc` sends `sc`'s samples and then an aggregation call (docs/methods/benchmark.md)."""

from __future__ import annotations

from medpanel.methods.benchmark.pipeline import BenchmarkPipeline


def zero_shot() -> BenchmarkPipeline:
    return BenchmarkPipeline("zero-shot")


def few_shot() -> BenchmarkPipeline:
    return BenchmarkPipeline("few-shot")


def cot_sc() -> BenchmarkPipeline:
    return BenchmarkPipeline("cot-sc")


def multipersona() -> BenchmarkPipeline:
    return BenchmarkPipeline("multipersona")


def self_refine() -> BenchmarkPipeline:
    return BenchmarkPipeline("self-refine")


def medprompt() -> BenchmarkPipeline:
    return BenchmarkPipeline("medprompt")
