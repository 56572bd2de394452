"""The methods, one room each (`methods/<method>/`): what only that method knows of a run (its tables,
its transitions, its figures, its paper's settings and its `protocol:` text), reaching the report
through `medpanel.experiments.analysis.methods.MethodReport`. No room imports another; the analysis
imports none (docs/architecture.md: method rooms).
"""
