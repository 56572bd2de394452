"""The seed paper's pipelines (generalist, panel, calibrated) as a method: the settings the paper fixes,
the Challenger's screened critiques, and the paper's Table 3 contrast."""
