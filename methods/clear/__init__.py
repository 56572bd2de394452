"""CLEAR as a method: its trajectory (pathways, verdicts), its pathway and ruling
tables, the retrieval depths its paper fixes.

Its part of the report is `report.py` (`REPORT`, a `MethodReport` in pyproject's `medpanel.reports`
entry points); its page is docs/methods/clear.md. CLEAR's pipeline and parts are `methods/clear/pipeline.py` and
`methods/clear/`.
"""
