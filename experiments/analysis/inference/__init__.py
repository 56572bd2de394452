"""Paired inference for comparisons of conditions: aligned data, resampling, exact tests,
Holm families, the 2x2 factorial, clustered logit, repeats, power planning, synthetic studies and
the cost ledger. docs/statistics.md says what each figure means."""
