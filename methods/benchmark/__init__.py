"""The benchmark context's single-model methods: the Table 7 shape, published references, the protocol.

Its part of the report is `report.py` (`REPORT`, a `MethodReport` in pyproject's `medpanel.reports`
entry points); its page is docs/methods/benchmark.md.
"""
