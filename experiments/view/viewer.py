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

import contextlib
import secrets
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.audit import (
    LEAKAGE_FILE,
    HitFields,
    HitRecord,
    finish_audit,
    leakage_table,
    reopen_audit,
)
from medpanel.experiments.analysis.digest import RowDigest, gc_frozen, gc_paused, read_with_document
from medpanel.experiments.analysis.header import CACHE_MEANING, accommodations_text
from medpanel.experiments.analysis.methods import reports
from medpanel.experiments.analysis.plots import write_plots
from medpanel.experiments.analysis.protocol import protocol_line
from medpanel.experiments.analysis.report import RunTables, build_tables
from medpanel.experiments.analysis.study_plots import write_study_plots
from medpanel.experiments.analysis.trajectory_types import Trajectory
from medpanel.experiments.analysis.transition_plots import write_transition_plots
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.files import safe_stem
from medpanel.experiments.run.store.rundir import RunData, load_run, read_document, transcript_path, transcript_paths
from medpanel.experiments.run.store.store import Row
from medpanel.experiments.view.events import column_label, comparison_pairs, event_view, first_difference, row_facts
from medpanel.experiments.view.render import num as _num
from medpanel.experiments.view.render import pretty as _pretty
from medpanel.experiments.view.render import render_event, render_events, render_value, safe_url
from medpanel.experiments.view.server import make_server as make_server  # re-exported: callers serve through it

TEMPLATES = Path(__file__).resolve().parent / "templates"
MESSAGE_MODES = ("none", "last", "all")


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


def page_name(dataset: str, qid: str) -> str:
    """File name of a question page: a readable prefix plus a hash of the exact (dataset, qid), like
    transcript names, so ids that sanitise alike (`a/b`, `a_b`) get their own pages and long ids fit."""
    return f"{safe_stem(f'{dataset}__{qid}', dataset, qid)}.html"



def _table_view(t: Table) -> dict[str, object]:
    return {"title": t.title, "columns": t.columns, "rows": [[_num(v) for v in r] for r in t.rows], "note": t.note}


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


# -- the site ----------------------------------------------------------------------------------


def build_site(run_dir: Path, *, plots: bool = True, n_boot: int = 10000, messages: str = "last",
               provenance: Path | None = None, shared: RunTables | None = None) -> list[Path]:
    """Write report/index.html, report/questions/*.html, report/plots/* and report/leakage.json.
    `shared`: the tables and digests `medpanel report` already built from these rows (at `n_boot`
    resamples), so they are not built again."""
    return build_report_site(run_dir, plots=plots, n_boot=n_boot, messages=messages, provenance=provenance,
                             shared=shared)[0]


@contextlib.contextmanager
def _stale_pages(own: Confined) -> Iterator[set[str]]:
    """The names of the question pages already there, for the build to discard as it writes each
    page over its old one (replaced whole by the write's rename); those left, whose questions the
    run no longer has or the build did not reach, are removed afterwards, also when it fails, so the
    folder ends as removing every old page first left it, without a removal per page."""
    stale = {old.name for old in own.path("report/questions").glob("*.html")}
    try:
        yield stale
    finally:
        for name in sorted(stale):
            own.unlink(f"report/questions/{name}")


def _key(row: Row) -> tuple[str, str, str, int]:
    return (row.condition, row.dataset, row.qid, row.repeat)


def build_report_site(run_dir: Path, *, plots: bool = True, n_boot: int = 10000, messages: str = "last",
                      provenance: Path | None = None, shared: RunTables | None = None
                      ) -> tuple[list[Path], RunTables | None]:
    """`build_site`, also handing back the run's tables with the rows and digests they were built
    from (None for a run without rows), for `medpanel report --html` to print and write.

    Every transcript is read once: one streamed pass, question by question, decodes each of a
    question's transcripts, makes its row's digest and audits its passages from that decoding,
    writes the question's page, and drops the documents; the tables, the figures and the index
    are built from the digests after it. (With `shared`, its digests stand for the pass's, and each
    page reads its own transcripts.)"""
    if messages not in MESSAGE_MODES:
        raise ValueError(f"messages must be one of {MESSAGE_MODES}, got {messages!r}")
    data = load_run(Path(run_dir))
    own = Confined(data.run_dir, private=False)  # the report is written inside the run, never through a link
    out = own.folder("report")
    own.folder("report/questions")
    own.folder("report/plots")
    shared = shared if shared is not None and shared.matches(data.rows) else None
    audit, provenance_file = reopen_audit(data.run_dir, provenance_file=provenance) if data.rows else (None, None)
    leaks: dict[tuple[str, str, str, int], list[HitRecord]] = {}
    digest_of: dict[tuple[str, str, str, int], RowDigest] = {}
    if shared is not None:
        for d in shared.digests:
            digest_of[_key(d.row)] = d
            leaks[_key(d.row)] = audit.check(d) if audit is not None else []
    conditions = data.conditions
    ctx = PageContext.of(data, leaks, messages)
    by_q: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in data.rows:
        by_q[r.key].append(r)
    path_of = transcript_paths(data.run_dir)
    table_rows: list[dict[str, Any]] = []
    pages: list[Path] = []
    scoring = data.record.scoring
    with gc_paused(), _stale_pages(own) as stale:
        for key in sorted(by_q):
            docs: dict[tuple[str, str, str, int], dict[str, Any] | None] | None = None
            if shared is None:
                docs = {}
                for row in by_q[key]:
                    doc, d = read_with_document(path_of(row) if row.transcript else None, row, scoring=scoring)
                    docs[_key(row)], digest_of[_key(row)] = doc, d
                    leaks[_key(row)] = audit.check(d) if audit is not None else []
            html, rows_here = question_page(data, key, by_q[key], digest_of, ctx, docs=docs)
            del docs  # this question's documents: never more than one page's at a time
            table_rows += rows_here
            name = page_name(*key)
            stale.discard(name)
            pages.append(own.write(f"report/questions/{name}", html, durable=False))
    digests = [digest_of[_key(r)] for r in data.rows]
    written: list[Path] = []
    leak_doc = None
    if audit is not None:
        leak_doc = finish_audit(data.run_dir, audit, data.rows, provenance_file)
        written.append(data.run_dir / "report" / LEAKAGE_FILE)
    with gc_frozen():  # the digests, kept out of the collector's passes while tables and figures are made
        ts = [d.trajectory for d in digests]  # for the transition figures
        tables = (list(shared.tables) if shared is not None else
                  build_tables(data.rows, data.record, n_boot=n_boot, digests=digests) if data.rows else [])
        run_tables = RunTables(data.rows, digests, list(tables)) if data.rows else None
        if leak_doc and data.rows:
            tables.append(leakage_table(leak_doc))
        plot_files: list[Path] = []
        transition_files: list[Path] = []
        if plots and data.rows:
            plot_files = write_plots(data.rows, conditions, out / "plots", n_boot=n_boot)
            plot_files += write_study_plots(data.rows, data.record, comparison_pairs(data.record, conditions),
                                            out / "plots", n_boot=n_boot)
            for method in reports():  # a method's own figures (the Table 7 run's accuracy-vs-tokens Pareto ...)
                plot_files += method.figures(data.rows, conditions, data.record, out / "plots", n_boot=n_boot)
            written += plot_files
            transition_files = write_transition_plots(ts, out / "plots", conditions)
            written += transition_files
    written += pages
    filters = {
        "condition": conditions, "dataset": sorted({r.dataset for r in data.rows}),
        "status": ["correct", "wrong", "invalid", "error"],
        "route": sorted({t["route"] for t in table_rows if t["route"]}),
    }
    index = own.write("report/index.html", ctx.env.get_template("index.html.j2").render(
        nonce=ctx.nonce, run=ctx.header, tables=[_table_view(t) for t in tables], rows=table_rows,
        filters=filters,
        plots=[{"name": p.stem, "png": f"plots/{p.name}", "svg": f"plots/{p.stem}.svg"}
               for p in plot_files if p.suffix == ".png"],
        transition_plots=[{"name": p.stem, "png": f"plots/{p.name}", "svg": f"plots/{p.stem}.svg"}
                          for p in transition_files if p.suffix == ".png"],
        leak_hits=len((leak_doc or {}).get("hits", []))), durable=False)
    written.append(index)
    return written, run_tables


@dataclass
class PageContext:
    """What every question page of one build shares: the templates, the nonce, the compared pairs,
    the repeats, the conditions' order, the audit's hits and the messages shown."""

    env: Environment
    nonce: str
    pairs: list[tuple[str, str]]
    repeats: int
    order: dict[str, int]
    leaks: dict[tuple[str, str, str, int], list[HitRecord]]
    messages: str
    header: dict[str, object]
    """`run_header(data)`: the same on every page of a build, made once (it counts the whole run's rows)."""

    @classmethod
    def of(cls, data: RunData, leaks: dict[tuple[str, str, str, int], list[HitRecord]],
           messages: str) -> PageContext:
        conditions = data.conditions
        repeats = max([r.repeat for r in data.rows], default=0) + 1
        return cls(env=environment(), nonce=secrets.token_urlsafe(16),
                   pairs=comparison_pairs(data.record, conditions), repeats=repeats,
                   order={c: i for i, c in enumerate(conditions)}, leaks=leaks, messages=messages,
                   header=run_header(data))


def question_page(data: RunData, key: tuple[str, str], key_rows: list[Row],
                  digest_of: Mapping[tuple[str, str, str, int], RowDigest], ctx: PageContext,
                  docs: Mapping[tuple[str, str, str, int], dict[str, Any] | None] | None = None
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
        dg = digest_of[(row.condition, row.dataset, row.qid, row.repeat)]
        if docs is not None:
            doc = docs[(row.condition, row.dataset, row.qid, row.repeat)]
        else:
            doc = None if dg.missing else read_document(transcript_path(data.run_dir, row))
        if doc and not question:
            question = doc.get("question", {})
        col = f"c{n}"
        row_leaks = leaks.get((row.condition, row.dataset, row.qid, row.repeat), [])
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
