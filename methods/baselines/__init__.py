"""The single-call baselines (direct, cot, sc) as a method: the temperature the protocol fixes.

Its part of the report is `report.py` (`REPORT`, a `MethodReport` in pyproject's `medpanel.reports`
entry points); its page is docs/methods/baselines.md.
"""
