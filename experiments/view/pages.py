"""The pages of a run's HTML report: a question's page (every condition's debate on it side by
side), what every page of one build shares (`PageContext`: the templates, the script nonce, the
run's header), and the page's file name. The finished report (`viewer.py`, its workers too) and
the live view build their pages here."""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from medpanel.experiments.analysis.audit import HitFields, HitRecord
from medpanel.experiments.analysis.digest import RowDigest
from medpanel.experiments.analysis.header import CACHE_MEANING, accommodations_text
from medpanel.experiments.analysis.protocol import protocol_line
from medpanel.experiments.analysis.trajectory_types import Trajectory
from medpanel.experiments.run.store.files import safe_stem
from medpanel.experiments.run.store.rundir import RunData, read_document, transcript_path
from medpanel.experiments.run.store.store import Row
from medpanel.experiments.view.events import column_label, comparison_pairs, event_view, first_difference, row_facts
from medpanel.experiments.view.render import num as _num
from medpanel.experiments.view.render import pretty as _pretty
from medpanel.experiments.view.render import render_event, render_events, render_value, safe_url

TEMPLATES = Path(__file__).resolve().parent / "templates"


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["safe_url"] = safe_url
    env.filters["num"] = _num
    env.filters["pretty"] = _pretty
    env.tests["listlike"] = lambda v: isinstance(v, list | tuple)
    env.globals["render_value"] = render_value
    env.globals["render_event"] = render_event
    return env


def _redact(url: object) -> str:
    if not isinstance(url, str) or "@" not in url:
        return "" if url is None else str(url)
    try:
        parts = urlsplit(url)
        return urlunsplit((parts.scheme, (parts.hostname or "") + (f":{parts.port}" if parts.port else ""),
                           parts.path, parts.query, parts.fragment))
    except ValueError:
        return "(redacted)"


RowKey = tuple[str, str, str, int]
"""A result row on a page: condition, dataset, qid, repeat (how `question_page` finds each row's
digest, document and leakage hits)."""


def row_key(row: Row) -> RowKey:
    return (row.condition, row.dataset, row.qid, row.repeat)


def page_name(dataset: str, qid: str) -> str:
    """File name of a question page: a readable prefix plus a hash of the exact (dataset, qid), like
    transcript names, so ids that sanitise alike (`a/b`, `a_b`) get their own pages and long ids fit."""
    return f"{safe_stem(f'{dataset}__{qid}', dataset, qid)}.html"


def run_header(data: RunData) -> dict[str, object]:
    record, sc = data.record, data.record.scenario
    model = record.model
    return {
        "name": record.name, "run_dir": data.run_dir.name,
        "description": sc.get("description", ""), "pipeline": sc.get("pipeline", ""),
        "protocol": protocol_line(sc, data.rows, record.slugs),
        "scenario_file": record.scenario_file or "",
        "model": f"{model.backend or ''}/{model.name or 'default'}",
        "base_url": _redact(model.base_url) if model.base_url else "",
        "sampling": f"temperature {model.temperature}, seed {model.seed}",
        "conditions": [{"slug": c.slug, "flags": ", ".join(f"{k}={v}" for k, v in c.flags.items())}
                       for c in record.conditions],
        "commit": (record.git.commit or "unknown") + (" (dirty tree)" if record.git.dirty else ""),
        "created": record.created or "", "state": data.status.get("state", "unknown"),
        "updated": data.status.get("updated", ""), "remaining": data.status.get("remaining", ""),
        "n_pairs": "" if record.n_pairs is None else record.n_pairs, "done": len(data.rows),
        "repeats": record.repeats, "versions": record.versions, "dataset": record.section("dataset"),
        "cache": record.cache_mode, "cache_meaning": CACHE_MEANING.get(record.cache_mode, ""),
        "accommodations": accommodations_text(record),
    }


@dataclass
class PageContext:
    """What every question page of one build shares: the templates, the nonce, the compared pairs,
    the repeats, the conditions' order, the audit's hits and the messages shown."""

    env: Environment
    nonce: str
    pairs: list[tuple[str, str]]
    repeats: int
    order: dict[str, int]
    leaks: dict[RowKey, list[HitRecord]]
    messages: str
    header: dict[str, object]
    """`run_header(data)`: the same on every page of a build, made once (it counts the whole run's rows)."""

    @classmethod
    def of(cls, data: RunData, leaks: dict[RowKey, list[HitRecord]],
           messages: str) -> PageContext:
        conditions = data.conditions
        repeats = max([r.repeat for r in data.rows], default=0) + 1
        return cls(env=environment(), nonce=secrets.token_urlsafe(16),
                   pairs=comparison_pairs(data.record, conditions), repeats=repeats,
                   order={c: i for i, c in enumerate(conditions)}, leaks=leaks, messages=messages,
                   header=run_header(data))


def question_page(data: RunData, key: tuple[str, str], key_rows: list[Row],
                  digest_of: Mapping[RowKey, RowDigest], ctx: PageContext,
                  docs: Mapping[RowKey, dict[str, Any] | None] | None = None
                  ) -> tuple[str, list[dict[str, object]]]:
    """One question's page (every condition's debate on it side by side) and its rows of the index's
    question table. The finished report and the live view build their pages here. `docs`: the
    rows' transcript documents already decoded (None: missing); without them each is read here."""
    nonce, pairs, repeats, order = ctx.nonce, ctx.pairs, ctx.repeats, ctx.order
    leaks, messages = ctx.leaks, ctx.messages
    table_rows: list[dict[str, object]] = []
    qtemplate = ctx.env.get_template("question.html.j2")
    rows = sorted(key_rows, key=lambda r: (order.get(r.condition, 99), r.repeat))
    question = data.questions.get(key, {})
    page = page_name(*key)
    columns: list[dict[str, Any]] = []
    events_by: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for n, row in enumerate(rows):
        rk = row_key(row)
        dg = digest_of[rk]
        if docs is not None:
            doc = docs[rk]
        else:
            doc = None if dg.missing else read_document(transcript_path(data.run_dir, row))
        if doc and not question:
            question = doc.get("question", {})
        col = f"c{n}"
        row_leaks = leaks.get(rk, [])
        leak_map: dict[tuple[int, str, int], list[HitFields]] = defaultdict(list)
        for h in row_leaks:
            leak_map[(int(h["event"]), h["key"], int(h["index"]))].extend(h["hits"])
        raw_events = (doc or {}).get("events", [])
        events_by[(row.condition, row.repeat)] = raw_events
        facts = row_facts(row, doc)
        flip, path = _flip_view(dg.trajectory)
        leak_kinds = sorted({x["kind"] for h in row_leaks for x in h["hits"]})
        columns.append({"id": col, "condition": row.condition, "repeat": row.repeat,
                        "across": _across(row.condition),
                        "label": column_label(row.condition, row.repeat, repeats), "answer": row.answer or "-",
                        "gold": row.gold, "status": row.status, "calls": row.calls,
                        "logical_calls": row.logical_calls, "tokens": row.tokens, "latency_s": row.latency_s,
                        "error": row.error or "", "error_kind": row.error_kind or "", "summary": row.summary,
                        "missing": doc is None, "leak": leak_kinds, "facts": facts,
                        "events": [event_view(e, i, col, messages, leak_map) for i, e in enumerate(raw_events)],
                        "flip": flip, "path": path})
        if flip is not None and flip["event"] is not None and flip["event"] < len(columns[-1]["events"]):
            ev = columns[-1]["events"][flip["event"]]
            ev["flip"] = flip
            flip["anchor"] = ev["anchor"]
        table_rows.append({"page": page, "dataset": row.dataset, "qid": row.qid, "condition": row.condition,
                           "repeat": row.repeat, "answer": row.answer or "-", "gold": row.gold,
                           "status": row.status, "calls": row.calls, "tokens": row.tokens,
                           "latency_s": round(row.latency_s, 2), "stem": str(question.get("text", ""))[:90],
                           "recruited": facts["recruited"], "passages": facts["passages"],
                           "route": facts["route"], "leak": "/".join(leak_kinds), "anchor": col})
    diffs = _diffs(pairs, repeats, columns, events_by)
    for c in columns:  # after the diffs and flips have marked their events
        c["events_html"] = render_events(c["events"])
    return qtemplate.render(nonce=nonce, run=ctx.header, question=_question_view(question, key), columns=columns,
                            diffs=diffs, messages=messages), table_rows


def _diffs(pairs: list[tuple[str, str]], repeats: int, columns: list[dict[str, Any]],
           events_by: dict[tuple[str, int], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """For each compared pair and repeat on this question, the first event where the two transcripts
    differ; both columns' events there are marked."""
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
    return diffs


def _flip_view(t: Trajectory) -> tuple[dict[str, Any] | None, str]:
    """The decisive flip of one debate (the turn where the majority became the final answer) with the
    interventions just before it, and the majority path over the turns (`A > B > B`)."""
    path = " > ".join(f"{s.label}: {s.majority}" for s in t.stages)
    decisive = next((f for f in t.flips() if f.decisive), None)
    if decisive is None:
        return None, path
    return {"label": decisive.label, "before": decisive.before_majority, "after": decisive.after_majority,
            "direction": decisive.direction.replace("_", " "), "event": decisive.event_index, "anchor": None,
            "after_what": "; ".join(x.show() for x in decisive.interventions) or "no intervention"}, path


def _across(slug: str) -> str:
    """The condition without its model (`c1r1+terse@qwen` -> `c1r1+terse`): what "side by side across
    models" groups by; empty for a run with one model."""
    return slug.rpartition("@")[0]


def _question_view(q: dict[str, Any], key: tuple[str, str]) -> dict[str, object]:
    gold = [str(g) for g in q.get("gold") or []]
    return {"dataset": key[0], "qid": key[1], "text": str(q.get("text", "")),
            "options": [{"letter": str(k), "text": str(v), "gold": str(k) in gold}
                        for k, v in (q.get("options") or {}).items()],
            "gold": ",".join(gold), "multi": bool(q.get("multi_answer"))}
