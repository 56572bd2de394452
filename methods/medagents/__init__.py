"""MedAgents as a method: how medpanel's medagents still differs from its published code.

Its part of the report is `report.py` (`REPORT`, a `MethodReport` in pyproject's `medpanel.reports`
entry points); its page is docs/methods/medagents.md.
"""
