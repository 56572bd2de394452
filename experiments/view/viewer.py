"""The static HTML viewer of a run: `report/index.html` plus one page per question.

The site is self-contained (inline CSS and JS, relative links, plots as files beside it), so it
opens from the file system and can be zipped. Every string that came from a model, a corpus or a
dataset goes through jinja2's autoescaping; links are only emitted for http(s) URLs, and a
Content-Security-Policy with a per-build nonce keeps any script that escaping might have missed
from running.

Transcript events are rendered generically (role, step, parsed fields, data as a definition
list), with a few known shapes made prominent: Challenger critiques, recruitment, the Knowledge
Gate's query, evidence briefs, CLEAR routes and votes. A role or step the viewer has never heard
of still shows every field.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from collections import defaultdict
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.audit import LEAKAGE_FILE, evidence_items, leakage_table, refresh_leakage
from medpanel.experiments.analysis.header import CACHE_MEANING, accommodations_text, cache_mode
from medpanel.experiments.analysis.protocol import protocol_line
from medpanel.experiments.analysis.report import build_tables, default_comparisons
from medpanel.experiments.run.rundir import RunData, load_run
from medpanel.experiments.run.store import Row, safe_stem

TEMPLATES = Path(__file__).resolve().parent / "templates"
MESSAGE_MODES = ("none", "last", "all")
LARGE_CHARS = 600
"""Event data values bigger than this (as JSON) are folded into a <details> element."""
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["safe_url"] = safe_url
    env.filters["num"] = _num
    env.filters["pretty"] = _pretty
    env.tests["listlike"] = lambda v: isinstance(v, list | tuple)
    return env


def safe_url(url: Any) -> str:
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


def _redact(url: Any) -> str:
    if not isinstance(url, str) or "@" not in url:
        return "" if url is None else str(url)
    try:
        parts = urlsplit(url)
        return urlunsplit((parts.scheme, (parts.hostname or "") + (f":{parts.port}" if parts.port else ""),
                           parts.path, parts.query, parts.fragment))
    except ValueError:
        return "(redacted)"


def _num(v: Any, digits: int = 2) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _yes(v: Any) -> bool:
    """A yes/no field as recorded: a bool, or its text ("no" and "false" are not true)."""
    if isinstance(v, str):
        return v.strip().lower() in ("yes", "true", "1")
    return bool(v)


def _pretty(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return "-"
    return str(v)


def _size(v: Any) -> int:
    return len(json.dumps(v, ensure_ascii=False, default=str))


def page_name(dataset: str, qid: str) -> str:
    """File name of a question page: a readable prefix plus a hash of the exact (dataset, qid), like
    transcript names, so ids that sanitise alike (`a/b`, `a_b`) get their own pages and long ids fit."""
    return f"{safe_stem(f'{dataset}__{qid}', dataset, qid)}.html"


# -- differences between conditions ------------------------------------------------------------


def event_signature(e: dict[str, Any]) -> tuple[str, str, str, str]:
    """What an event said: (kind, role, step, parsed fields or content). Timing and cache state are ignored."""
    if e.get("kind") == "call":
        body: Any = e.get("parsed") if e.get("parsed") is not None else e.get("content", "")
    else:
        body = [e.get("content", ""), e.get("data") or {}]
    return (str(e.get("kind", "")), str(e.get("role", "")), str(e.get("step", "")),
            json.dumps(body, sort_keys=True, ensure_ascii=False, default=str))


def first_difference(ref: list[dict[str, Any]], other: list[dict[str, Any]]) -> int | None:
    """Index of the first event where `other` departs from `ref`; None when the debates are identical."""
    a = [event_signature(e) for e in ref]
    b = [event_signature(e) for e in other]
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def comparison_pairs(meta: dict[str, Any], conditions: list[str]) -> list[tuple[str, str]]:
    """The scenario's `compare` pairs (else the one-flag pairs the tables use), reference first."""
    flags = {c["slug"]: c.get("flags", {}) for c in meta.get("conditions", [])}
    compare = meta.get("scenario", {}).get("compare") or default_comparisons(conditions, flags)
    return [(a, b) for a, b in compare if a in conditions and b in conditions]


# -- view models -------------------------------------------------------------------------------


def _badges(e: dict[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    parsed = e.get("parsed") or {}
    data = e.get("data") or {}
    if e.get("kind") == "vote":
        out.append((f"final {e.get('content', '')}", "final"))
        if data.get("rule"):
            out.append((f"rule {data['rule']}", ""))
    if isinstance(parsed, dict):
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
    if e.get("invalid"):
        out.append(("INVALID", "bad"))
    if e.get("error"):
        out.append(("error", "bad"))
    if e.get("cache_hit"):
        out.append(("cached", "dim"))
    if int(e.get("attempts", 1) or 1) > 1:
        out.append((f"{e['attempts']} attempts", "dim"))
    return out


def _evidence_view(item: dict[str, Any], anchor: str, hits: list[dict[str, Any]]) -> dict[str, Any]:
    known = ("text", "content", "title", "doc_id", "id", "url", "source", "year", "quality", "score")
    return {"anchor": anchor, "title": str(item.get("title") or item.get("doc_id") or item.get("id") or "(untitled)"),
            "doc_id": str(item.get("doc_id") or item.get("id") or ""), "url": str(item.get("url") or ""),
            "source": str(item.get("source") or ""), "year": item.get("year"), "quality": item.get("quality"),
            "score": item.get("score"), "text": str(item.get("text") or item.get("content") or ""),
            "extra": {k: v for k, v in item.items() if k not in known}, "hits": hits}


def event_view(e: dict[str, Any], idx: int, col: str, messages: str,
               leak: dict[tuple[int, str, int], list[dict[str, Any]]]) -> dict[str, Any]:
    data = dict(e.get("data") or {})
    evidence = []
    for key, i, item in evidence_items(e):
        evidence.append(_evidence_view(item, f"{col}-e{idx}-{key}-{i}", leak.get((idx, key, i), [])))
    for key in {k for k, _, _ in evidence_items(e)}:
        data.pop(key, None)
    # Big nested values (CLEAR's evidence bundle, verdict histories) fold away; small ones stay in view.
    large = {k: v for k, v in data.items() if isinstance(v, dict | list) and _size(v) > LARGE_CHARS}
    for k in large:
        data.pop(k)
    msgs = list(e.get("messages") or [])
    shown = msgs if messages == "all" else msgs[-1:] if messages == "last" else []
    role = str(e.get("role", ""))
    parsed = e.get("parsed")
    usage = e.get("usage") or {}
    weak = role == "challenger" and isinstance(parsed, dict) and _yes(parsed.get("material_weakness"))
    return {"idx": idx, "anchor": f"{col}-e{idx}", "kind": str(e.get("kind", "")), "role": role,
            "role_class": _SAFE.sub("_", role.lower()) or "unknown", "agent": str(e.get("agent", "")),
            "round": e.get("round", 0), "turn": e.get("turn", 0), "step": str(e.get("step", "")),
            "content": str(e.get("content") or ""), "parsed": parsed if isinstance(parsed, dict) else None,
            "data": data, "data_large": large, "evidence": evidence, "messages": shown, "messages_total": len(msgs),
            "usage": {"prompt": usage.get("prompt_tokens", 0), "completion": usage.get("completion_tokens", 0)},
            "latency_s": float(e.get("latency_s") or 0.0), "model": str(e.get("model") or ""),
            "cache_hit": bool(e.get("cache_hit")), "invalid": bool(e.get("invalid")),
            "error": e.get("error"), "badges": _badges(e), "weak": weak, "diff": [],
            "leak": sorted({h["kind"] for ev in evidence for h in ev["hits"]})}


def row_facts(row: Row, doc: dict[str, Any] | None) -> dict[str, Any]:
    """What the question table filters on: recruited, retrieved passages, CLEAR route."""
    recruited = int(row.summary.get("recruited", 0) or 0)
    roles = list(row.summary.get("recruited_roles") or [])
    passages = 0
    route = str(row.summary.get("route") or "")
    gate = None
    for e in (doc or {}).get("events", []):
        passages += sum(1 for _ in evidence_items(e))
        data = e.get("data") or {}
        if isinstance(data.get("route"), str) and data["route"]:
            route = data["route"]
        if "fired" in data and e.get("role") == "knowledge_gate":
            gate = bool(data["fired"]) or bool(gate)
        if isinstance(data.get("recruited"), list) and data["recruited"] and not recruited:
            recruited = len(data["recruited"])
    return {"recruited": recruited, "recruited_roles": roles, "passages": passages, "route": route, "gate": gate}


def _column_label(condition: str, repeat: int, repeats: int) -> str:
    return f"{condition} · repeat {repeat}" if repeats > 1 else condition


def _leak_index(leak_doc: dict[str, Any] | None) -> dict[tuple[str, str, str, int], list[dict[str, Any]]]:
    out: dict[tuple[str, str, str, int], list[dict[str, Any]]] = defaultdict(list)
    for h in (leak_doc or {}).get("hits", []):
        out[(h["condition"], h["dataset"], h["qid"], int(h["repeat"]))].append(h)
    return out


def _table_view(t: Table) -> dict[str, Any]:
    return {"title": t.title, "columns": t.columns, "rows": [[_num(v) for v in r] for r in t.rows], "note": t.note}


def _header(data: RunData) -> dict[str, Any]:
    meta, sc = data.meta, data.meta.get("scenario", {})
    model = meta.get("model", {})
    git = meta.get("git", {}) or {}
    return {
        "name": meta.get("name", data.run_dir.name), "run_dir": data.run_dir.name,
        "description": sc.get("description", ""), "pipeline": sc.get("pipeline", ""),
        "protocol": protocol_line(sc),
        "scenario_file": meta.get("scenario_file") or "",
        "model": f"{model.get('backend', '')}/{model.get('name') or 'default'}",
        "base_url": _redact(model.get("base_url")) if model.get("base_url") else "",
        "sampling": f"temperature {model.get('temperature')}, seed {model.get('seed')}",
        "conditions": [{"slug": c.get("slug", ""),
                        "flags": ", ".join(f"{k}={v}" for k, v in c.get("flags", {}).items())}
                       for c in meta.get("conditions", [])],
        "commit": (git.get("commit") or "unknown") + (" (dirty tree)" if git.get("dirty") else ""),
        "created": meta.get("created", ""), "state": data.status.get("state", "unknown"),
        "updated": data.status.get("updated", ""), "remaining": data.status.get("remaining", ""),
        "n_pairs": meta.get("n_pairs", ""), "done": len(data.rows), "repeats": meta.get("repeats", 1),
        "versions": meta.get("versions", {}), "dataset": sc.get("dataset", {}),
        "cache": cache_mode(meta), "cache_meaning": CACHE_MEANING.get(cache_mode(meta), ""),
        "accommodations": accommodations_text(meta),
    }


# -- the site ----------------------------------------------------------------------------------


def build_site(run_dir: Path, *, plots: bool = True, n_boot: int = 10000, messages: str = "last",
               provenance: Path | None = None) -> list[Path]:
    """Write report/index.html, report/questions/*.html, report/plots/* and report/leakage.json."""
    if messages not in MESSAGE_MODES:
        raise ValueError(f"messages must be one of {MESSAGE_MODES}, got {messages!r}")
    data = load_run(Path(run_dir))
    out = data.run_dir / "report"
    qdir = out / "questions"
    qdir.mkdir(parents=True, exist_ok=True)
    for old in qdir.glob("*.html"):
        old.unlink()
    written: list[Path] = []
    leak_doc = None
    if data.rows:
        leak_doc = refresh_leakage(data.run_dir, data.rows, provenance_file=provenance)
        written.append(data.run_dir / "report" / LEAKAGE_FILE)
    leaks = _leak_index(leak_doc)
    conditions = data.conditions
    tables = build_tables(data.rows, data.meta, n_boot=n_boot) if data.rows else []
    if leak_doc and data.rows:
        tables.append(leakage_table(leak_doc))
    plot_files: list[Path] = []
    if plots and data.rows:
        from medpanel.experiments.analysis.plots import write_plots

        plot_files = write_plots(data.rows, conditions, out / "plots", n_boot=n_boot)
        written += plot_files
    nonce = secrets.token_urlsafe(16)
    env = environment()
    pairs = comparison_pairs(data.meta, conditions)
    repeats = max([r.repeat for r in data.rows], default=0) + 1
    order = {c: i for i, c in enumerate(conditions)}
    by_q: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in data.rows:
        by_q[r.key].append(r)
    table_rows: list[dict[str, Any]] = []
    qtemplate = env.get_template("question.html.j2")
    for key in sorted(by_q):
        rows = sorted(by_q[key], key=lambda r: (order.get(r.condition, 99), r.repeat))
        question = data.questions.get(key, {})
        page = page_name(*key)
        columns = []
        events_by: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for n, row in enumerate(rows):
            doc = data.transcript(row)
            if doc and not question:
                question = doc.get("question", {})
            col = f"c{n}"
            row_leaks = leaks.get((row.condition, row.dataset, row.qid, row.repeat), [])
            leak_map: dict[tuple[int, str, int], list[dict[str, Any]]] = defaultdict(list)
            for h in row_leaks:
                leak_map[(int(h["event"]), h["key"], int(h["index"]))].extend(h["hits"])
            raw_events = (doc or {}).get("events", [])
            events_by[(row.condition, row.repeat)] = raw_events
            facts = row_facts(row, doc)
            leak_kinds = sorted({x["kind"] for h in row_leaks for x in h["hits"]})
            columns.append({"id": col, "condition": row.condition, "repeat": row.repeat,
                            "label": _column_label(row.condition, row.repeat, repeats), "answer": row.answer or "-",
                            "gold": row.gold, "status": row.status, "calls": row.calls,
                            "logical_calls": row.logical_calls, "tokens": row.tokens, "latency_s": row.latency_s,
                            "error": row.error or "", "error_kind": row.error_kind or "", "summary": row.summary,
                            "missing": doc is None, "leak": leak_kinds, "facts": facts,
                            "events": [event_view(e, i, col, messages, leak_map) for i, e in enumerate(raw_events)]})
            table_rows.append({"page": page, "dataset": row.dataset, "qid": row.qid, "condition": row.condition,
                               "repeat": row.repeat, "answer": row.answer or "-", "gold": row.gold,
                               "status": row.status, "calls": row.calls, "tokens": row.tokens,
                               "latency_s": round(row.latency_s, 2), "stem": str(question.get("text", ""))[:90],
                               "recruited": facts["recruited"], "passages": facts["passages"],
                               "route": facts["route"], "leak": "/".join(leak_kinds), "anchor": col})
        col_of = {(c["condition"], c["repeat"]): c for c in columns}
        diffs = []
        for a, b in pairs:
            for rep in range(repeats):
                ca, cb = col_of.get((a, rep)), col_of.get((b, rep))
                if ca is None or cb is None:
                    continue
                i = first_difference(events_by[(a, rep)], events_by[(b, rep)])
                entry = {"a": ca["label"], "b": cb["label"], "a_col": ca["id"], "b_col": cb["id"], "index": i,
                         "a_event": None, "b_event": None}
                if i is not None:
                    for side, c in (("a", ca), ("b", cb)):
                        if i < len(c["events"]):
                            ev = c["events"][i]
                            ev["diff"].append(f"first difference: {cb['label']} vs {ca['label']}")
                            entry[f"{side}_event"] = ev
                diffs.append(entry)
        qpath = qdir / page
        qpath.write_text(qtemplate.render(nonce=nonce, run=_header(data), question=_question_view(question, key),
                                          columns=columns, diffs=diffs, messages=messages),
                         encoding="utf-8")
        written.append(qpath)
    index = out / "index.html"
    filters = {
        "condition": conditions, "dataset": sorted({r.dataset for r in data.rows}),
        "status": ["correct", "wrong", "invalid", "error"],
        "route": sorted({t["route"] for t in table_rows if t["route"]}),
    }
    index.write_text(env.get_template("index.html.j2").render(
        nonce=nonce, run=_header(data), tables=[_table_view(t) for t in tables], rows=table_rows, filters=filters,
        plots=[{"name": p.stem, "png": f"plots/{p.name}", "svg": f"plots/{p.stem}.svg"}
               for p in plot_files if p.suffix == ".png"],
        leak_hits=len((leak_doc or {}).get("hits", []))), encoding="utf-8")
    written.append(index)
    return written


def _question_view(q: dict[str, Any], key: tuple[str, str]) -> dict[str, Any]:
    gold = [str(g) for g in q.get("gold") or []]
    return {"dataset": key[0], "qid": key[1], "text": str(q.get("text", "")),
            "options": [{"letter": str(k), "text": str(v), "gold": str(k) in gold}
                        for k, v in (q.get("options") or {}).items()],
            "gold": ",".join(gold), "multi": bool(q.get("multi_answer"))}


# -- serving -----------------------------------------------------------------------------------


class ReadOnlyHandler(SimpleHTTPRequestHandler):
    """GET and HEAD of files under the report folder; no listings, no other methods (501)."""

    server_version = "medpanel-view"

    def list_directory(self, path: Any) -> None:
        self.send_error(404, "No directory listings")
        return None

    def end_headers(self) -> None:
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def make_server(report_dir: Path, port: int = 0, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """A server for `report_dir` bound to localhost; port 0 picks a free port (see server_address)."""
    handler = functools.partial(ReadOnlyHandler, directory=str(Path(report_dir).resolve()))
    return ThreadingHTTPServer((host, port), handler)
