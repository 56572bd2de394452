"""The scenario: its YAML read and validated, its axes, and the plan resolved from it once."""
