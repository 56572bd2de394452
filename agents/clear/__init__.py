"""CLEAR: cross-source evidence adjudication (parametric, local and dynamic pathways).

The pipeline lives in `medpanel.methods.clear.pipeline`; these modules hold its parts:
`settings` (settings and named conditions), `bundle` (candidate records and the evidence bundle),
`quality` (source-quality tiers), `pathways` (candidate generation, QPIS search), `verifier`
(aggregation verifier and heuristic fallback), `adjudication` (override guard, challenge audit,
targeted follow-up search), `gate` (MCQ format gate) and `freetext` (free-text tasks, response
generator, rubric grader).
"""
