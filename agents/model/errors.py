"""The model room's exceptions, in a module of their own so that the command line can catch them
without importing AutoGen and the openai client (seconds) on every start."""

from __future__ import annotations


class BackendError(RuntimeError):
    """A backend cannot be built (missing key or extra); the message names the fix."""


class LocalModelError(RuntimeError):
    """The embedded model's server could not be found, started or reached."""
