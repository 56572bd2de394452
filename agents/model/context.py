"""An agent's model context: the whole history, bounded only by a declared context window.

The seed paper's agents keep their state by appending messages (appendix A.2), so by default every
agent sees everything it was shown and said. Only a backend that declares a context window (the
embedded server's 8,192 tokens, or `model.context_window` set by the user) bounds it, and then
only what can go goes: earlier *positions* (colleagues' posts and the agent's own replies), oldest
first. The question, critiques, briefs, prompts and the format instructions are never dropped.
Every request whose view had to drop something new records a `context_trimmed` note naming it.

Which pieces of a message are positions is declared by whoever writes the message (`Part`), so the
policy does not guess from the text. Tokens are estimated, not counted: no tokenizer for an
arbitrary endpoint is available offline, so UTF-8 bytes / 3 (BPE tokenizers average 3.5 to 4.5
bytes a token on English and clinical text) errs on the side of trimming a little early.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import AssistantMessage, LLMMessage, UserMessage

from medpanel.agents.model.tokens import MESSAGE_OVERHEAD as MESSAGE_OVERHEAD  # re-exported where they always were
from medpanel.agents.model.tokens import estimate_tokens as estimate_tokens


@dataclass(frozen=True)
class Part:
    """A piece of a message that a full context window may drop: one earlier position."""

    text: str
    """Exactly as it occurs in the message's content."""
    label: str
    """What it was, for the `context_trimmed` note: "turn 2 position of cardiologist"."""


@dataclass
class Trim:
    """What one request's view dropped."""

    dropped: list[str]
    """Labels of everything left out of this request, oldest first."""
    new: list[str]
    """Those not already left out of this context's previous request."""
    tokens_before: int
    tokens_after: int
    window: int
    budget: int
    still_over: bool
    """True when dropping every position was not enough: the request goes as it is and the
    endpoint decides (the question, critiques and briefs are never dropped)."""


@dataclass
class _Entry:
    message: LLMMessage
    parts: list[Part] = field(default_factory=list)
    own_reply: str | None = None
    """Label of an assistant message: the agent's own earlier position, droppable as a whole."""


def _content(message: LLMMessage) -> str:
    content = message.content
    return content if isinstance(content, str) else str(content)


def _with_content(message: LLMMessage, text: str) -> LLMMessage:
    return message.model_copy(update={"content": text})


def omitted(label: str) -> str:
    return f"[{label}: omitted to fit the model's context window]"


class WindowedContext(ChatCompletionContext):
    """A `ChatCompletionContext` that returns the whole history unless it exceeds `window` tokens.

    `reserve` is what the request needs besides this history: the system prompt and room for the
    reply (`max_tokens`). `on_trim` is called when a request's view drops something new.
    """

    def __init__(self, *, window: int | None, reserve: int = 0, on_trim: Callable[[Trim], Any] | None = None,
                 count: Callable[[str], int] = estimate_tokens) -> None:
        super().__init__()
        self.window = window
        self.reserve = reserve
        self.on_trim = on_trim
        self.count = count
        self._entries: list[_Entry] = []
        self._pending: list[Part] = []
        self._reply_label: str | None = None
        self._replies = 0
        self._reported: list[str] = []

    # -- writing -----------------------------------------------------------------------------------

    def expect(self, parts: list[Part] | None, reply: str | None = None) -> None:
        """Declare the droppable parts of the next user message added (the agent's next prompt), and
        how to name the reply that follows it."""
        self._pending = list(parts or [])
        self._reply_label = reply

    async def add_message(self, message: LLMMessage) -> None:
        await super().add_message(message)
        entry = _Entry(message)
        if isinstance(message, UserMessage):
            text = _content(message)
            entry.parts = [p for p in self._pending if p.text and p.text in text]
            self._pending = []
        elif isinstance(message, AssistantMessage):
            self._replies += 1
            entry.own_reply = self._reply_label or f"own reply {self._replies}"
            self._reply_label = None
        self._entries.append(entry)

    async def clear(self) -> None:
        await super().clear()
        self._entries, self._pending, self._replies, self._reported = [], [], 0, []
        self._reply_label = None

    def fork(self) -> WindowedContext:
        """A copy for a side question: the same history and window, changes stay in the copy."""
        other = WindowedContext(window=self.window, reserve=self.reserve, on_trim=self.on_trim, count=self.count)
        other._messages = list(self._messages)
        other._entries = [copy.copy(e) for e in self._entries]
        other._replies, other._reported = self._replies, list(self._reported)
        other._pending, other._reply_label = list(self._pending), self._reply_label
        return other

    # -- reading -----------------------------------------------------------------------------------

    async def get_messages(self) -> list[LLMMessage]:
        """The view a request is built from (AutoGen calls this once per model call)."""
        return self.view(report=True)

    def full(self) -> list[LLMMessage]:
        return list(self._messages)

    def view(self, *, report: bool = False) -> list[LLMMessage]:
        messages = [e.message for e in self._entries]
        if self.window is None:
            return messages
        budget = self.window - self.reserve
        texts = [_content(m) for m in messages]
        sizes = [self.count(t) for t in texts]
        before = total = sum(sizes)
        if total <= budget:
            return messages
        dropped: list[str] = []

        def replace(i: int, text: str, label: str) -> None:
            nonlocal total
            texts[i] = text
            dropped.append(label)
            size = self.count(text)
            total += size - sizes[i]
            sizes[i] = size

        # Oldest first, message by message; inside a message in the order the parts appear.
        for i, entry in enumerate(self._entries):
            if total <= budget:
                break
            if entry.own_reply is not None:
                replace(i, omitted(entry.own_reply), entry.own_reply)
            for part in entry.parts:
                if total <= budget:
                    break
                replace(i, texts[i].replace(part.text, omitted(part.label), 1), part.label)
        view = [m if t == _content(m) else _with_content(m, t) for m, t in zip(messages, texts, strict=True)]
        new = [d for d in dropped if d not in self._reported]
        if report and self.on_trim is not None and (new or total > budget):
            self.on_trim(Trim(dropped=dropped, new=new, tokens_before=before, tokens_after=total, window=self.window,
                              budget=budget, still_over=total > budget))
        if report:
            self._reported = dropped
        return view
