"""The baselines as the `medpanel.pipelines` entry points name them: `baseline` holds `direct`, `cot` and
`sc` as variants, and each is a pipeline of its own (one factory each, as an entry point needs)."""

from __future__ import annotations

from medpanel.methods.baselines.pipeline import BaselinePipeline


def direct() -> BaselinePipeline:
    return BaselinePipeline("direct")


def cot() -> BaselinePipeline:
    return BaselinePipeline("cot")


def sc() -> BaselinePipeline:
    return BaselinePipeline("sc")
