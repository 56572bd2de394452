"""CLEAR: cross-source evidence adjudication (parametric, local and dynamic pathways), its room.

The pipeline is `pipeline.py`; its parts: `settings` (settings and named conditions), `bundle`
(candidate records and the evidence bundle), `quality` (source-quality tiers), `pathways` (candidate
generation, QPIS search), `verdict` (aggregation verifier and heuristic fallback), `adjudication`
(override guard, challenge audit, targeted follow-up search), `gate` (MCQ format gate),
`healthbench` (HealthBench's scoring), `summary` and its tables (`tables`, `paper_tables`, `table3`),
its roles with their prompts (`roles/`). As a method: its trajectory (pathways, verdicts), its
pathway and ruling transitions, and its part of the report (`report.py`, `REPORT`, a `MethodReport`
in pyproject's `medpanel.reports` entry points); its page is docs/methods/clear.md. The panel's CLEAR
channel builds on these parts, a floor above; the free-text files it grades by are read in
`agents/freetext/`, which the run room reads too.
"""
