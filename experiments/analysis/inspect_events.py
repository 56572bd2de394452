"""A debate's transcript as Inspect events and messages: what `inspect view` and `inspect_ai.analysis` read.

Each transcript event becomes, in order:
- a model call -> one `ModelEvent`: its input is the messages that call sent (system prompt included),
  its output the reply, `role` the medpanel role (Inspect's viewer titles it "Model Call (role): model"),
  with the agent, step, round and turn in its metadata and the call's tokens in its usage (the
  endpoint's prompt-cache reads as `input_tokens_cache_read`); a reply from medpanel's response cache
  is `cache="read"` and, as in Inspect's own logs, counts in no `model_usage` or `role_usage`;
- a note, vote, brief, recruitment, decision or error -> one `InfoEvent` whose `source` is the agent;
- each run of events by one agent sits in a `span` of type "agent" named for that agent, so the
  Transcript tab says who acted.

Message ids follow Inspect's own convention: a message keeps its id in every later call that resends
it. `inspect_ai.analysis.messages_df` gathers a sample's messages from its model events' inputs and
outputs and keeps each id once, so a reply resent as history counts once, and every reply once. An
input message is one per place in its agent's conversation (agent, the message before it, role,
content): a prompt that two agents are sent, or one agent is sent again later in its conversation, is
one row per place. Every reply gets its own id. A call that resends a whole earlier conversation (a
re-ask, the same request in a later turn) gets its last prompt as a new message, so each call is one
reply row in `messages_df`.

The sample's Messages tab gets a readable copy of the debate (`debate_messages`): each card opens with
a line naming the agent, because the viewer's card header shows only the role ("ASSISTANT") and
`ChatMessage.source` may only be "input", "generate" or "operator".
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from medpanel.agents.types import TranscriptEvent
from medpanel.experiments.run.store.files import safe_stem

if TYPE_CHECKING:  # Inspect is an extra, imported where an export is built
    from inspect_ai.model import ModelUsage

Qualify = Callable[[str | None], str]
"""Names a model as `backend/name` (the export's `_qualifier`): the one form Inspect's log uses."""


def when(t: float) -> datetime:
    return datetime.fromtimestamp(t, tz=timezone.utc)


def event_span(ev: TranscriptEvent) -> tuple[float, float] | None:
    """(start, end) epoch seconds of a transcript event: `t` is taken when the event is recorded, after
    the reply, so a call started `latency_s` before it. An event stored without `t` (an early
    transcript) has no time: the record's default, the time it was read, is not its time."""
    if "t" not in ev.model_fields_set or ev.t <= 0:
        return None
    lat = ev.latency_s if ev.kind == "call" and ev.latency_s > 0 else 0.0
    return ev.t - lat, ev.t


def header(ev: TranscriptEvent) -> str:
    """The card's first line: who spoke, in which part, and where in the debate."""
    where = [f"round {ev.round}"] if ev.round else []
    where += [f"turn {ev.turn}"] if ev.turn else []
    parts = [f"**{ev.agent or '?'}**", ev.role or "?", ev.step or ev.kind]
    if where:
        parts.append(", ".join(where))
    return " · ".join(p for p in parts if p)


def _text(ev: TranscriptEvent) -> str:
    return ev.content or ev.error or json.dumps(ev.data, ensure_ascii=False)


def _meta(ev: TranscriptEvent, n: int) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "agent": ev.agent, "medpanel_role": ev.role, "kind": ev.kind, "step": ev.step, "round": ev.round,
        "turn": ev.turn, "event": n, "invalid": ev.invalid, "cache_hit": ev.cache_hit, "attempts": ev.attempts or 1,
        "prompt_tokens": ev.usage.prompt_tokens, "completion_tokens": ev.usage.completion_tokens}
    for key, value in (("parsed", ev.parsed), ("error", ev.error), ("data", ev.data)):
        if value:
            meta[key] = value
    return meta


@dataclass
class _Ids:
    """Deterministic message ids for one sample: one per place in an agent's conversation tree."""

    prefix: str
    known: dict[tuple[str, str, str, str], str] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)
    again: Counter[str] = field(default_factory=Counter)
    count: int = 0

    def new(self) -> str:
        self.count += 1
        return f"{self.prefix}-m{self.count}"

    def thread(self, agent: str, messages: list[dict[str, object]]) -> list[tuple[str, dict[str, object]]]:
        """(id, metadata) for each message one call sent. The metadata names the agent and the message
        before it: Inspect's writer pools input messages by everything but their id, so it must keep
        apart what these ids keep apart."""
        out: list[tuple[str, dict[str, object]]] = []
        parent = ""
        for m in messages:
            key = (agent, parent, str(m.get("role", "")), _content(m))
            mid = self.known.get(key) or self.known.setdefault(key, self.new())
            out.append((mid, {"agent": agent, "after": parent}))
            parent = mid
        if out and all(mid in self.used for mid, _ in out):
            # The very conversation sent again (a re-ask, or the same request in a later turn): its last
            # prompt was sent once more, and is a message of its own, so that this call's reply is not
            # taken for a repeat of the reply before it (Inspect drops an assistant message that repeats
            # the previous one word for word).
            mid, meta = out[-1]
            self.again[mid] += 1
            out[-1] = (self.new(), {**meta, "sent_again": self.again[mid], "first": mid})
        self.used.update(mid for mid, _ in out)
        return out

    def reply(self, agent: str, parent: str, content: str) -> str:
        rid = self.new()
        self.used.add(rid)
        self.known.setdefault((agent, parent, "assistant", content), rid)  # resent later as history: the same message
        return rid


def _content(m: dict[str, object]) -> str:
    c = m.get("content", "")
    if isinstance(c, str):
        return c
    # OpenAI content parts: keep the text parts (medpanel sends text only)
    return "\n".join(str(p.get("text", "")) for p in c if isinstance(p, dict)) if isinstance(c, list) else str(c)


def _chat(m: dict[str, Any], mid: str, meta: dict[str, Any], model: str | None) -> Any:
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser

    role, text = m.get("role"), _content(m)
    if role == "system":
        return ChatMessageSystem(id=mid, content=text, source="input", metadata=meta)
    if role == "assistant":
        return ChatMessageAssistant(id=mid, content=text, model=model, metadata=meta)
    if role == "tool":
        return ChatMessageTool(id=mid, content=text, tool_call_id=m.get("tool_call_id"), metadata=meta)
    return ChatMessageUser(id=mid, content=text, source="input", metadata=meta)


@dataclass
class SampleEvents:
    events: list[Any]
    started: float | None
    completed: float | None
    role_usage: dict[str, ModelUsage]


def sample_events(evs: list[TranscriptEvent], sample_uuid: str, qualify: Qualify, config: Any) -> SampleEvents:
    """The Inspect events of one transcript; `qualify` names a model the way `eval.model` does."""
    from inspect_ai.event import InfoEvent, ModelEvent, SpanBeginEvent, SpanEndEvent
    from inspect_ai.model import ChatCompletionChoice, ChatMessageAssistant, ModelOutput, ModelUsage

    spans = [s for s in (event_span(e) for e in evs) if s]
    t0 = min(s[0] for s in spans) if spans else None
    t1 = max(s[1] for s in spans) if spans else None
    ids = _Ids(sample_uuid)
    out: list[Any] = []
    role_usage: dict[str, ModelUsage] = {}
    span_id, span_agent, span_end = None, None, t0 or 0.0

    def stamp(t: float | None) -> dict[str, Any]:
        return {"timestamp": when(t), "working_start": max(0.0, t - (t0 or t))} if t else {}

    for n, ev in enumerate(evs):
        agent = ev.agent or ev.role or "?"
        start, end = event_span(ev) or (None, None)
        if agent != span_agent:
            if span_id:
                out.append(SpanEndEvent(id=span_id, **stamp(span_end)))
            span_id, span_agent = safe_stem(f"{agent}-{n}", sample_uuid, n), agent
            out.append(SpanBeginEvent(id=span_id, name=agent, type="agent", **stamp(start)))
        span_end = end or span_end
        meta = _meta(ev, n)
        if ev.kind != "call":
            info = {"kind": ev.kind, "role": ev.role, "step": ev.step, "round": ev.round, "turn": ev.turn,
                    "text": _text(ev), "data": ev.data}
            out.append(InfoEvent(source=agent, span_id=span_id, metadata=meta, data=info, **stamp(end)))
            continue
        model = qualify(ev.model or None)
        sent = ev.messages
        thread = ids.thread(agent, sent)
        cached = ev.usage.cached_tokens
        # Inspect's input_tokens are those charged at the full rate: the endpoint's prompt-cache reads
        # are apart, in input_tokens_cache_read; the total is the endpoint's (prompt + completion).
        usage = ModelUsage(input_tokens=meta["prompt_tokens"] - cached, output_tokens=meta["completion_tokens"],
                           total_tokens=meta["prompt_tokens"] + meta["completion_tokens"],
                           input_tokens_cache_read=cached or None)
        role = ev.role
        if role and not ev.cache_hit:  # a reply from medpanel's cache spent nothing (see `spent`)
            role_usage[role] = role_usage.get(role, ModelUsage()) + usage
        reply = ev.content
        choices = []
        if reply or not ev.error:
            msg = ChatMessageAssistant(id=ids.reply(agent, thread[-1][0] if thread else "", reply), content=reply,
                                       model=model, source="generate", metadata=meta)
            choices = [ChatCompletionChoice(message=msg, stop_reason="stop")]
        output = ModelOutput(model=model, choices=choices, usage=usage, time=ev.latency_s or None, error=ev.error)
        extra = {"completed": when(end), "working_time": max(0.0, end - (start or end))} if end else {}
        sent_messages = [_chat(m, i, where, model) for m, (i, where) in zip(sent, thread, strict=True)]
        out.append(ModelEvent(model=model, role=role or None, input=sent_messages,
                              tools=[], tool_choice="none", config=config, output=output, span_id=span_id,
                              error=ev.error, cache="read" if ev.cache_hit else None,
                              retries=max(0, meta["attempts"] - 1), metadata=meta, **stamp(start), **extra))
    if span_id:
        out.append(SpanEndEvent(id=span_id, **stamp(span_end)))
    return SampleEvents(events=out, started=t0, completed=t1, role_usage=role_usage)


def spent(event: Any) -> bool:
    """Whether a model event's usage was spent: a reply from medpanel's response cache was not sent.

    As Inspect logs its own cache: the event is marked `cache="read"` and keeps the usage of the call
    that first produced the reply, and it is left out of the sample's and the log's `model_usage`
    (what `inspect view`'s tokens read), so they count the tokens medpanel counts."""
    return event.event == "model" and event.output.usage is not None and event.cache != "read"


def debate_messages(evs: list[TranscriptEvent], question_text: str, qualify: Qualify, prefix: str) -> list[Any]:
    """The Messages tab: the question, then one card per transcript event, each naming its agent."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser

    messages: list[object] = [ChatMessageUser(id=f"{prefix}-q", content=question_text, source="input")]
    for n, ev in enumerate(evs):
        is_call = ev.kind == "call"
        text = _text(ev)
        if not is_call and ev.content and ev.data:  # a vote's letter, then who voted what
            text += "\n\n```json\n" + json.dumps(ev.data, ensure_ascii=False, indent=1) + "\n```"
        messages.append(ChatMessageAssistant(
            id=f"{prefix}-d{n}", content=f"{header(ev)}\n\n{text}",
            model=qualify(ev.model or None) if is_call else None, source="generate" if is_call else None,
            metadata=_card_meta(ev, n)))
    return messages


def _card_meta(ev: TranscriptEvent, n: int) -> dict[str, object]:
    """A card's metadata: who and where; the tokens and the messages sent are in its model event."""
    meta = {k: v for k, v in _meta(ev, n).items() if k in ("agent", "medpanel_role", "kind", "step", "round", "turn",
                                                           "event", "error")}
    meta.update({k: True for k, v in (("invalid", ev.invalid), ("cache_hit", ev.cache_hit)) if v})
    return meta
