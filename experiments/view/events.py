"""How a transcript's events look in the viewer: badges, evidence, the facts a row is filtered on,
and the first event where two conditions' debates part.

Events are rendered generically (role, step, parsed fields, data as a definition list), with a few
known shapes made prominent: Challenger critiques, recruitment, the Knowledge Gate's query, evidence
briefs, CLEAR routes and votes. A role or step the viewer has never heard of still shows every field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from medpanel.experiments.analysis.audit import HitFields, evidence_items
from medpanel.experiments.analysis.report import default_comparisons
from medpanel.experiments.run.store.records import RunRecord
from medpanel.experiments.run.store.store import Row

LARGE_CHARS = 600
"""Event data values bigger than this (as JSON) are folded into a <details> element."""
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def _yes(v: object) -> bool:
    """A yes/no field as recorded: a bool, or its text ("no" and "false" are not true)."""
    if isinstance(v, str):
        return v.strip().lower() in ("yes", "true", "1")
    return bool(v)


def _size(v: object) -> int:
    return len(json.dumps(v, ensure_ascii=False, default=str))



# -- differences between conditions ------------------------------------------------------------


def event_signature(e: dict[str, object]) -> tuple[str, str, str, str]:
    """What an event said: (kind, role, step, parsed fields or content). Timing and cache state are ignored."""
    if e.get("kind") == "call":
        body: object = e.get("parsed") if e.get("parsed") is not None else e.get("content", "")
    else:
        body = [e.get("content", ""), e.get("data") or {}]
    return (str(e.get("kind", "")), str(e.get("role", "")), str(e.get("step", "")),
            json.dumps(body, sort_keys=True, ensure_ascii=False, default=str))


def first_difference(ref: list[dict[str, object]], other: list[dict[str, object]]) -> int | None:
    """Index of the first event where `other` departs from `ref`; None when the debates are identical.
    Signatures are compared event by event and stop at the first difference (most debates of two
    conditions part within a few events)."""
    for i, (x, y) in enumerate(zip(ref, other, strict=False)):
        if x is not y and event_signature(x) != event_signature(y):
            return i
    return None if len(ref) == len(other) else min(len(ref), len(other))


def comparison_pairs(record: RunRecord, conditions: list[str]) -> list[tuple[str, str]]:
    """The scenario's `compare` pairs (else the one-flag pairs the tables use), reference first."""
    compare = record.compare or default_comparisons(conditions, record.flags)
    return [(a, b) for a, b in compare if a in conditions and b in conditions]


# -- view models -------------------------------------------------------------------------------


def _badges(e: dict[str, Any]) -> list[tuple[str, str]]:
    """An event's badges: the final vote, what its reply says, what the pipeline noted, how the call went."""
    out: list[tuple[str, str]] = []
    data = e.get("data") or {}
    if e.get("kind") == "vote":
        out.append((f"final {e.get('content', '')}", "final"))
        if data.get("rule"):
            out.append((f"rule {data['rule']}", ""))
    parsed = e.get("parsed")
    if parsed:  # most events have no parsed fields or no data: no badge to look for
        out += _parsed_badges(parsed)
    if data:
        out += _data_badges(data)
    if e.get("invalid"):
        out.append(("INVALID", "bad"))
    if e.get("error"):
        out.append(("error", "bad"))
    if e.get("cache_hit"):
        out.append(("cached", "dim"))
    if int(e.get("attempts", 1) or 1) > 1:
        out.append((f"{e['attempts']} attempts", "dim"))
    return out


def _parsed_badges(parsed: object) -> list[tuple[str, str]]:
    """The reply's answer, the Challenger's material weakness and the recruiter's "needed"."""
    out: list[tuple[str, str]] = []
    if not isinstance(parsed, dict):
        return out
    if "answer" in parsed:
        ans = parsed["answer"]
        out.append((f"answer {','.join(ans) if isinstance(ans, list) else ans}", "answer"))
    if "material_weakness" in parsed:
        # The badge says what the parsed field says; the gap type is a separate field (a model
        # may well write `yes` with gap type `none`), shown beside it, never instead of it.
        weak = _yes(parsed["material_weakness"])
        gap = str(parsed.get("gap_type") or "none")
        label = f"material weakness: {'yes' if weak else 'no'}"
        if gap != "none":
            label += f" ({gap})"
        elif weak:
            label += " (gap type none)"
        out.append((label, "warn" if weak else "ok"))
    if "needed" in parsed:
        out.append((f"needs {parsed.get('specialty', '')}" if parsed["needed"] else "no one needed",
                    "warn" if parsed["needed"] else ""))
    return out


def _data_badges(data: dict[str, Any]) -> list[tuple[str, str]]:
    """What the pipeline noted on the event: a redacted answer, the gate, the route, the recruits."""
    out: list[tuple[str, str]] = []
    if data.get("answer_redacted"):
        out.append(("answer redacted", "warn"))
    if "fired" in data:
        out.append(("gate fired" if data["fired"] else "gate not fired", "warn" if data["fired"] else ""))
    if isinstance(data.get("route"), str) and data["route"]:
        out.append((f"route {data['route']}", "route"))
    recruited = data.get("recruited")
    if isinstance(recruited, list) and recruited:
        names = [str(r.get("role", r.get("name", "?"))) if isinstance(r, dict) else str(r) for r in recruited]
        out.append(("recruited: " + ", ".join(names), "warn"))
    return out


class EvidenceView(TypedDict):
    """One retrieved passage as its event's card lists it (`render._evidence`)."""

    anchor: str
    title: str
    doc_id: str
    url: str
    source: str
    year: object
    quality: object
    score: object
    text: str
    extra: dict[str, object]
    hits: list[HitFields]


class EventView(TypedDict):
    """One event's card as the question page draws it (`render.render_event`); the page marks the
    first difference between compared columns (`diff`) and a majority's flip (`flip`) on it after."""

    idx: int
    anchor: str
    kind: str
    role: str
    role_class: str
    agent: str
    round: object
    turn: object
    step: str
    content: str
    parsed: dict[str, object] | None
    data: dict[str, object]
    data_large: dict[str, object]
    evidence: list[EvidenceView]
    messages: list[dict[str, object]]
    messages_total: int
    usage: dict[str, object]
    latency_s: float
    model: str
    cache_hit: bool
    invalid: bool
    error: object
    badges: list[tuple[str, str]]
    weak: bool
    diff: list[str]
    leak: list[str]
    flip: NotRequired[dict[str, object]]


def _evidence_view(item: Mapping[str, Any], anchor: str, hits: list[HitFields]) -> EvidenceView:
    known = ("text", "content", "title", "doc_id", "id", "url", "source", "year", "quality", "score")
    return {"anchor": anchor, "title": str(item.get("title") or item.get("doc_id") or item.get("id") or "(untitled)"),
            "doc_id": str(item.get("doc_id") or item.get("id") or ""), "url": str(item.get("url") or ""),
            "source": str(item.get("source") or ""), "year": item.get("year"), "quality": item.get("quality"),
            "score": item.get("score"), "text": str(item.get("text") or item.get("content") or ""),
            "extra": {k: v for k, v in item.items() if k not in known}, "hits": hits}


def event_view(e: dict[str, Any], idx: int, col: str, messages: str,
               leak: dict[tuple[int, str, int], list[HitFields]]) -> EventView:
    data = dict(e.get("data") or {})
    evidence = []
    if data:
        for key, i, item in evidence_items(e):
            evidence.append(_evidence_view(item, f"{col}-e{idx}-{key}-{i}", leak.get((idx, key, i), [])))
            data.pop(key, None)
    # Big nested values (CLEAR's evidence bundle, verdict histories) fold away; small ones stay in view.
    large: dict[str, object] = {}
    if data:
        large = {k: v for k, v in data.items() if isinstance(v, dict | list) and v and _size(v) > LARGE_CHARS}
        for k in large:
            data.pop(k)
    msgs = e.get("messages") or []
    if type(msgs) is not list:
        msgs = list(msgs)
    shown = list(msgs) if messages == "all" else msgs[-1:] if messages == "last" else []
    role = str(e.get("role", ""))
    parsed = e.get("parsed")
    usage = e.get("usage") or {}
    weak = role == "challenger" and isinstance(parsed, dict) and _yes(parsed.get("material_weakness"))
    return {"idx": idx, "anchor": f"{col}-e{idx}", "kind": str(e.get("kind", "")), "role": role,
            "role_class": _role_class(role), "agent": str(e.get("agent", "")),
            "round": e.get("round", 0), "turn": e.get("turn", 0), "step": str(e.get("step", "")),
            "content": str(e.get("content") or ""), "parsed": parsed if isinstance(parsed, dict) else None,
            "data": data, "data_large": large, "evidence": evidence, "messages": shown, "messages_total": len(msgs),
            "usage": {"prompt": usage.get("prompt_tokens", 0), "completion": usage.get("completion_tokens", 0)},
            "latency_s": float(e.get("latency_s") or 0.0), "model": _model(e),
            "cache_hit": bool(e.get("cache_hit")), "invalid": bool(e.get("invalid")),
            "error": e.get("error"), "badges": _badges(e), "weak": weak, "diff": [],
            "leak": sorted({h["kind"] for ev in evidence for h in ev["hits"]}) if evidence else []}


_ROLE_CLASSES: dict[str, str] = {}
"""A role's CSS class, by role: a run's cards have a handful of roles."""


def _role_class(role: str) -> str:
    done = _ROLE_CLASSES.get(role)
    if done is None:
        done = _SAFE.sub("_", role.lower()) or "unknown"
        if len(_ROLE_CLASSES) < 10_000:
            _ROLE_CLASSES[role] = done
    return done


def _model(e: dict[str, Any]) -> str:
    """The model name, with its `models:` label when the run has several (`big (strong)`)."""
    label = (e.get("data") or {}).get("model_label")
    return f"{e.get('model') or ''} ({label})" if label else str(e.get("model") or "")


def row_facts(row: Row, doc: dict[str, Any] | None) -> dict[str, object]:
    """What the question table filters on: recruited, retrieved passages, CLEAR route."""
    # The panel counts its recruits; KAMAC lists them (one dict per expert it brought in).
    stored = row.summary.get("recruited") or 0
    recruited = len(stored) if isinstance(stored, list) else int(stored)
    roles = list(row.summary.get("recruited_roles") or [])
    passages = 0
    route = str(row.summary.get("route") or "")
    gate = None
    for e in (doc or {}).get("events", []):
        data = e.get("data") or {}
        if not data:  # most events note nothing: no passage, route, gate or recruit to look for
            continue
        passages += sum(1 for _ in evidence_items(e))
        if isinstance(data.get("route"), str) and data["route"]:
            route = data["route"]
        if "fired" in data and e.get("role") == "knowledge_gate":
            gate = bool(data["fired"]) or bool(gate)
        if isinstance(data.get("recruited"), list) and data["recruited"] and not recruited:
            recruited = len(data["recruited"])
    return {"recruited": recruited, "recruited_roles": roles, "passages": passages, "route": route, "gate": gate}


def column_label(condition: str, repeat: int, repeats: int) -> str:
    return f"{condition} · repeat {repeat}" if repeats > 1 else condition
