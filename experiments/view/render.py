"""HTML of a question page's transcript events and of the generic values inside them (a reply's
parsed fields, an event's data, a summary), built in Python: what the `event`, `evidence` and
`value` macros of `_macros.html.j2` wrote.

A full run's pages hold about 150,000 events and several times as many values, rendered
recursively; as jinja macros each one cost a frame, a context and attribute look-ups through the
runtime. The output is the same markup, and every string from a model, a corpus or a dataset still
is escaped as `markupsafe.escape` escapes it: nothing is marked safe unescaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from markupsafe import Markup, escape

from medpanel.experiments.view.events import EventView, EvidenceView

MAX_DEPTH = 6
"""Below this depth a value is shown as its escaped text (a model can send deeply nested JSON)."""
LONG_TEXT = 160
"""Strings longer than this (or with a newline) get a text block of their own."""


_ESCAPED: dict[str, str] = {}
"""Short strings already escaped: a run's pages repeat the same roles, steps, agents, keys and
letters hundreds of thousands of times."""
_SHORT = 64
_MAX_ESCAPED = 200_000


def _esc(v: object) -> str:
    """`markupsafe.escape(v)` as text, without building a Markup for each of the millions of leaves
    a run's pages hold: a plain string gets the same five replacements (a short one once per build),
    anything else (Markup, numbers, objects with `__html__`) goes through markupsafe itself."""
    if type(v) is str:
        done = _ESCAPED.get(v)
        if done is not None:
            return done
        done = (v.replace("&", "&amp;").replace(">", "&gt;").replace("<", "&lt;").replace("'", "&#39;")
                .replace('"', "&#34;"))
        if len(v) <= _SHORT and len(_ESCAPED) < _MAX_ESCAPED:
            _ESCAPED[v] = done
        return done
    if type(v) is int:
        return str(v)
    return str(escape(v))


def safe_url(url: object) -> str:
    """The URL if it is http(s) (credentials removed), else '' (no javascript:, data:, file: links)."""
    if not isinstance(url, str) or not url.strip():
        return ""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return ""
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return ""
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme.lower(), netloc, parts.path, parts.query, parts.fragment))


def num(v: object, digits: int = 2) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def pretty(v: object) -> str:
    """A scalar as the page prints it: booleans as yes/no, None as a dash."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    return str(v)


def render_value(v: object, depth: int = 0) -> Markup:
    """Mappings as definition lists, lists of structures as ordered lists, flat lists inline,
    long text in a block, scalars as `pretty` prints them; every leaf escaped."""
    return Markup("".join(_parts(v, depth, [])))


_LEAVES = (str, int, float, bool, type(None))
"""The types of a decoded JSON document's leaves: a list of only these is flat (shown inline)."""


def _parts(v: Any, depth: int, out: list[str]) -> list[str]:
    """`render_value`'s markup appended to `out`, which the caller joins once. What a decoded JSON
    document holds (str, dict, list) is told by `type(v) is` before the general checks (a
    Mapping, a tuple or a str subclass takes those, in the same order, to the same markup)."""
    if depth > MAX_DEPTH:
        out += ('<span class="dim">', _esc(v), "</span>")
        return out
    t = type(v)
    if t is str:
        if "\n" in v or len(v) > LONG_TEXT:
            out += ('<div class="text">', _esc(v), "</div>")
        else:
            out.append(_ESCAPED.get(v) or _esc(v))  # a short string seen before: its markup without a call
    elif t is dict or (t is not list and isinstance(v, Mapping)):
        if not v:
            out.append('<span class="dim">(empty)</span>')
            return out
        out.append('<dl class="kv">')
        for k, x in v.items():
            out += ("<dt>", _ESCAPED.get(k) or _esc(k), "</dt><dd>")
            _parts(x, depth + 1, out)
            out.append("</dd>")
        out.append("</dl>")
    elif t is list or isinstance(v, list | tuple):
        if not v:
            out.append('<span class="dim">(none)</span>')
        elif all(type(x) in _LEAVES for x in v) or not any(isinstance(x, Mapping | list | tuple) for x in v):
            out.append(", ".join([f'<span class="item">{_esc(pretty(x))}</span>' for x in v]))
        else:
            out.append('<ol class="list">')
            for x in v:
                out.append("<li>")
                _parts(x, depth + 1, out)
                out.append("</li>")
            out.append("</ol>")
    elif isinstance(v, str) and ("\n" in v or len(v) > LONG_TEXT):
        out += ('<div class="text">', _esc(v), "</div>")
    else:
        out.append(_esc(pretty(v)))
    return out


_HEADS: dict[tuple[str, str, str, str], tuple[str, str, str, str]] = {}
"""An event card's header around its anchor, index and agent, by its kind, role and step: a run's
cards have a few dozen distinct ones (the agent, which names a question's own specialists, and the
round and turn are escaped per card instead of keying thousands of headers)."""
_MAX_HEADS = 10_000


def _head(ev: EventView) -> tuple[str, str, str, str]:
    """The header's markup before the card's flags, between its id and its link, after its index
    up to the agent, and after the agent; made once per kind, role and step."""
    key = (ev["kind"], ev["role_class"], ev["role"], ev["step"])
    done = _HEADS.get(key)
    if done is None:
        e = _esc
        done = (f'<div class="ev kind-{e(ev["kind"])} role-{e(ev["role_class"])}',
                f'" data-role="{e(ev["role"])}" data-step="{e(ev["step"])}">\n<div class="evh"><a class="idx" href="#',
                f'</a> <span class="kind">{e(ev["kind"])}</span> <span class="role">{e(ev["role"])}</span> '
                '<span class="agent">', f'</span> <span class="step">{e(ev["step"])}</span>')
        if len(_HEADS) < _MAX_HEADS:
            _HEADS[key] = done
    return done


def render_event(ev: EventView) -> Markup:
    """One event's card (`events.event_view`'s dict): header, badges, notes, parsed fields or the
    reply, data, evidence, error, and for a call the messages shown and the raw reply."""
    return Markup("".join(_event(ev, [])))


def _event(ev: EventView, out: list[str]) -> list[str]:
    """`render_event`'s markup appended to `out`."""
    e = _esc
    before, between, to_agent, after = _head(ev)
    anchor = e(ev["anchor"])
    out += (before, " weak" if ev["weak"] else "", " diff" if ev["diff"] else "", " leak" if ev["leak"] else "",
            '" id="', anchor, between, anchor, '">#', e(ev["idx"]), to_agent, e(ev["agent"]), after)
    if ev["round"] or ev["turn"]:
        out.append(f' <span class="rt">round {e(ev["round"])} turn {e(ev["turn"])}</span>')
    out += [f' <span class="badge {e(cls)}">{e(label)}</span>' for label, cls in ev["badges"]]
    call = ev["kind"] == "call"
    if call:
        usage = ev["usage"]
        out.append(f' <span class="cost">{e(usage["prompt"])}+{e(usage["completion"])} tok · '
                   f'{e(num(ev["latency_s"], 2))} s</span>')
    out.append("</div>\n")
    if ev["diff"]:
        out += [f'<div class="diffnote">{e(d)}</div>' for d in ev["diff"]]
    flip = ev.get("flip")
    if flip:
        out.append(f'<div class="flipnote" data-flip="{e(flip["label"])}">majority flipped here: {e(flip["before"])} '
                   f'&rarr; {e(flip["after"])} ({e(flip["direction"])}), after {e(flip["after_what"])}</div>')
    if ev["parsed"] is not None:
        out.append('<div class="parsed">')
        _parts(ev["parsed"], 0, out)
        out.append("</div>\n")
    elif ev["content"]:
        out.append(f'<div class="content text">{e(ev["content"])}</div>')
    if ev["data"]:
        out.append('<div class="data">')
        _parts(ev["data"], 0, out)
        out.append("</div>")
    for k, v in ev["data_large"].items():
        out.append(f'<details class="big"><summary>{e(k)}</summary>')
        _parts(v, 0, out)
        out.append("</details>")
    if ev["evidence"]:
        out.append(_evidence(ev["evidence"]))
    if ev["error"]:
        out.append(f'<div class="err">{e(ev["error"])}</div>')
    if call:
        shown, total = ev["messages"], ev["messages_total"]
        sent = f", {len(shown)} of {e(total)} messages sent" if shown else f" ({e(total)} messages sent)"
        model = f" · {e(ev['model'])}" if ev["model"] else ""
        out.append(f'<details class="raw"><summary>raw reply{sent}{model}</summary>\n')
        for m in shown:
            name = m.get("name")
            out.append(f'<div class="msg"><span class="mrole">{e(m.get("role", ""))}{f":{e(name)}" if name else ""}'
                       "</span> ")
            _parts(m.get("content", ""), 0, out)
            out.append("</div>")
        out.append(f'<div class="msg reply"><span class="mrole">reply</span> <div class="text">{e(ev["content"])}'
                   "</div></div>\n</details>\n")
    out.append("</div>")
    return out


def render_events(events: list[EventView]) -> Markup:
    """A column's event cards, each followed by a newline (what the page's loop over `render_event`
    wrote), joined once."""
    out: list[str] = []
    for ev in events:
        _event(ev, out).append("\n")
    return Markup("".join(out))


def _evidence(passages: list[EvidenceView]) -> str:
    e = _esc
    n = len(passages)
    out = [f'<div class="brief">\n<div class="briefh">evidence: {n} passage{"s" if n != 1 else ""}</div>\n'
           '<ol class="evlist">\n']
    for p in passages:
        leak = ' class="leak"' if p["hits"] else ""
        out.append(f'<li{leak}><a href="#{e(p["anchor"])}">{e(p["title"])}</a>\n<span class="dim">{e(p["source"])}')
        if p["year"]:
            out.append(f", {e(p['year'])}")
        if p["quality"]:
            out.append(f" · quality {e(p['quality'])}")
        if p["score"] is not None:
            out.append(f" · score {e(num(p['score'], 3))}")
        out.append("</span>\n")
        url = safe_url(p["url"])
        if url:
            out.append(f'<a class="ext" href="{e(url)}" rel="noopener noreferrer" target="_blank">{e(url)}</a>')
        elif p["url"]:
            out.append(f'<span class="dim">{e(p["url"])}</span>')
        out += [f'<span class="badge bad">{e(h["kind"])} leak: {e(h["detector"])}</span>' for h in p["hits"]]
        out.append("</li>\n")
    out.append("</ol>\n")
    for p in passages:
        out.append(f'<details class="passage{" leak" if p["hits"] else ""}" id="{e(p["anchor"])}"><summary>'
                   f'[{e(p["doc_id"])}] {e(p["title"])}</summary>\n<div class="text">{e(p["text"])}</div>\n')
        if p["extra"]:
            out.append(render_value(p["extra"]))
        out += [f'<div class="leakhit">{e(h["kind"])} · {e(h["detector"])} ({e(h["score"])} ≥ {e(h["threshold"])}): '
                f'{e(h["detail"])}</div>' for h in p["hits"]]
        out.append("</details>\n")
    out.append("</div>")
    return "".join(out)
