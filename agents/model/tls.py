"""The process's one TLS context, for the lean client and the SDK's alike (no SDK import for it)."""

from __future__ import annotations

import functools
import ssl


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One TLS context for the process: loading the CA bundle costs ~70 ms, and clients are built per
    question. A context (unlike an httpx client) is safe to share across threads and event loops."""
    return ssl.create_default_context()
