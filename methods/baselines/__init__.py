"""The single-call baselines (direct, cot, sc) as a method: the temperature the protocol fixes."""
