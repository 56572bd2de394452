"""The exception that halts a run, apart from the model client: the run's budget raises it, and
a reader of the run's settings (the report) imports the budget without AutoGen."""

from __future__ import annotations


class RunHalted(RuntimeError):
    """The run was halted (a budget spent, Ctrl-C): the question stops unfinished and is not
    recorded, so a resume runs it again (its calls so far are answered by the cache)."""
