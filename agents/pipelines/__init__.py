"""Pipelines compose roles into a method: the contract (`base`), the built-in pipelines, and the
registry that maps a scenario's `pipeline:` to one (`registry`)."""
