"""A message's tokens as estimated (UTF-8 bytes / 3, see `context`): apart from the context
policy, so the rate limits (which a run's settings name) import no AutoGen."""

from __future__ import annotations

MESSAGE_OVERHEAD = 4
"""Tokens a chat template adds around each message (role markers, separators)."""


def estimate_tokens(text: str) -> int:
    return len(text.encode("utf-8")) // 3 + MESSAGE_OVERHEAD
