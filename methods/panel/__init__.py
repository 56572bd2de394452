"""The seed paper's pipelines (generalist, panel, calibrated) as a method: the settings the paper fixes,
the Challenger's screened critiques, and the paper's Table 3 contrast.

Its part of the report is `report.py` (`REPORT`, a `MethodReport` in pyproject's `medpanel.reports`
entry points); its page is docs/methods/generalist.md, panel.md, calibrated.md.
"""
