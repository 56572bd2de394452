"""The single-call baselines (direct, cot, sc): the pipeline (`pipeline.py`), each as a pipeline of
its own (`variants.py`), and as a method the temperature the protocol fixes. The benchmark builds on
them (its settings, summary and `cot-sc` samples are the baselines'), a floor above; the tally they
vote with is every method's (`agents/pipelines/tally.py`).

Its part of the report is `report.py` (`REPORT`, a `MethodReport` in pyproject's `medpanel.reports`
entry points); its page is docs/methods/baselines.md.
"""
