"""The model room's exceptions, in a module of their own so that the command line can catch them
without importing AutoGen and the openai client (seconds) on every start."""

from __future__ import annotations


class BackendError(RuntimeError):
    """A backend cannot be built (missing key or extra); the message names the fix."""


class LocalModelError(RuntimeError):
    """The embedded model's server could not be found, started or reached."""


class BatchUnanswered(RuntimeError):
    """A batch ended (expired, failed, cancelled) without answering this call's line; the text starts
    with its kind (`batch_expired: ...`). Retried like a transport error: the retry joins the next batch."""

    @property
    def kind(self) -> str:
        head = str(self).split(":", 1)[0]
        return head if head.startswith("batch_") else "batch_failed"
