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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.audit import LEAKAGE_FILE, finish_audit, leakage_table, reopen_audit
from medpanel.experiments.analysis.digest import gc_frozen
from medpanel.experiments.analysis.fanout import in_child, process_count
from medpanel.experiments.analysis.methods import reports
from medpanel.experiments.analysis.plots import write_plots
from medpanel.experiments.analysis.report import RowTables, RunTables, row_tables
from medpanel.experiments.analysis.study_plots import write_study_plots
from medpanel.experiments.analysis.transition_plots import (
    transition_plot_names,
    write_flow_plots,
    write_transition_bars,
)
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.rundir import RunData, load_run
from medpanel.experiments.view.events import comparison_pairs
from medpanel.experiments.view.pages import PageContext as PageContext  # re-exported: the live view's pages
from medpanel.experiments.view.pages import environment as environment
from medpanel.experiments.view.pages import page_name as page_name
from medpanel.experiments.view.pages import question_page as question_page
from medpanel.experiments.view.pages import row_key
from medpanel.experiments.view.pages import run_header as run_header
from medpanel.experiments.view.render import num as _num
from medpanel.experiments.view.render import safe_url as safe_url
from medpanel.experiments.view.server import make_server as make_server  # re-exported: callers serve through it
from medpanel.experiments.view.site_pass import SitePass

MESSAGE_MODES = ("none", "last", "all")


def _table_view(t: Table) -> dict[str, object]:
    return {"title": t.title, "columns": t.columns, "rows": [[_num(v) for v in r] for r in t.rows], "note": t.note}


# -- the site ----------------------------------------------------------------------------------


def build_site(run_dir: Path, *, plots: bool = True, n_boot: int = 10000, messages: str = "last",
               provenance: Path | None = None, shared: RunTables | None = None,
               processes: int | None = None) -> list[Path]:
    """Write report/index.html, report/questions/*.html, report/plots/* and report/leakage.json.
    `shared`: the tables and digests `medpanel report` already built from these rows (at `n_boot`
    resamples), so they are not built again."""
    return build_report_site(run_dir, plots=plots, n_boot=n_boot, messages=messages, provenance=provenance,
                             shared=shared, processes=processes)[0]


class _Pages:
    """The question pages a build has written (`kept`) and the old ones it has not written over yet
    (`stale`)."""

    def __init__(self, stale: set[str]) -> None:
        self.stale, self.kept = stale, set[str]()

    def keep(self, names: list[str]) -> None:
        self.kept.update(names)
        self.stale.difference_update(names)


@contextlib.contextmanager
def _stale_pages(own: Confined) -> Iterator[_Pages]:
    """The names of the question pages already there, for the build to discard as it writes each
    page over its old one (replaced whole by the write's rename); those left, whose questions the
    run no longer has or the build did not reach, are removed afterwards, also when it fails, so the
    folder ends as removing every old page first left it, without a removal per page. When the
    build fails, every page it did not keep goes (a worker may have written pages of questions
    after the one that stopped it, which one process would never have reached)."""
    questions = own.path("report/questions")
    pages = _Pages({old.name for old in questions.glob("*.html")})
    failed = True
    try:
        yield pages
        failed = False
    finally:
        gone = {p.name for p in questions.glob("*.html")} - pages.kept if failed else pages.stale
        for name in sorted(gone):
            own.unlink(f"report/questions/{name}")


@dataclass
class _Early:
    """What `medpanel report --html` makes while the question pages are written: the tables of the
    rows and the figures they alone give."""

    tables: RowTables | None = None
    plot_files: list[Path] = field(default_factory=list)


def _row_figures(data: RunData, out: Path, n_boot: int) -> list[Path]:
    conditions = data.conditions
    files = write_plots(data.rows, conditions, out / "plots", n_boot=n_boot)
    files += write_study_plots(data.rows, data.record, comparison_pairs(data.record, conditions), out / "plots",
                               n_boot=n_boot)
    for method in reports():  # a method's own figures (the Table 7 run's accuracy-vs-tokens Pareto ...)
        files += method.figures(data.rows, conditions, data.record, out / "plots", n_boot=n_boot)
    return files


def build_report_site(run_dir: Path, *, plots: bool = True, n_boot: int = 10000, messages: str = "last",
                      provenance: Path | None = None, shared: RunTables | None = None, processes: int | None = None
                      ) -> tuple[list[Path], RunTables | None]:
    """`build_site`, also handing back the run's tables with the rows and digests they were built
    from (None for a run without rows), for `medpanel report --html` to print and write.

    Every transcript is read once: one streamed pass, question by question, decodes each of a
    question's transcripts, makes its row's digest and audits its passages from that decoding,
    writes the question's page, and drops the documents; the pass is spread over `processes`
    processes (None: `fanout.process_count`'s choice), each taking contiguous chunks of the sorted
    questions, while this one builds the tables of the rows and draws the figures they give; the
    answer transitions' tables and figures, the audit and the index follow from the digests. (With
    `shared`, its digests stand for the pass's, and each page reads its own transcripts.)"""
    if messages not in MESSAGE_MODES:
        raise ValueError(f"messages must be one of {MESSAGE_MODES}, got {messages!r}")
    data = load_run(Path(run_dir))
    own = Confined(data.run_dir, private=False)  # the report is written inside the run, never through a link
    out = own.folder("report")
    own.folder("report/questions")
    own.folder("report/plots")
    shared = shared if shared is not None and shared.matches(data.rows) else None
    audit, provenance_file = reopen_audit(data.run_dir, provenance_file=provenance) if data.rows else (None, None)
    site = SitePass(data, own, audit, PageContext.of(data, {}, messages), shared)
    early = _Early()

    def meanwhile() -> None:
        if data.rows and shared is None:
            early.tables = row_tables(data.rows, data.record, n_boot=n_boot)
        if plots and data.rows:
            early.plot_files = _row_figures(data, out, n_boot)

    table_rows: list[dict[str, Any]] = []
    pages: list[Path] = []
    count = process_count(processes, len(data.rows))
    with _stale_pages(own) as kept:
        for chunk in site.run(count, meanwhile):
            site.take(chunk)
            kept.keep(chunk.pages)
            table_rows += chunk.table_rows
            pages += [own.path(f"report/questions/{name}") for name in chunk.pages]
            if chunk.error is not None:
                raise chunk.error
    digests = [site.digest_of[row_key(r)] for r in data.rows]
    written: list[Path] = []
    leak_doc = None
    if audit is not None:
        leak_doc = finish_audit(data.run_dir, audit, data.rows, provenance_file)
        written.append(data.run_dir / "report" / LEAKAGE_FILE)
    with gc_frozen():  # the digests, kept out of the collector's passes while tables and figures are made
        ts = [d.trajectory for d in digests]  # for the transition figures, drawn by a worker meanwhile
        drawing = plots and bool(data.rows)
        # A forked worker draws the flow diagrams; this process the tables, the index and the bars.
        flows = in_child(lambda: write_flow_plots(ts, out / "plots", data.conditions),
                         fork=count > 1) if drawing else list
        bars: list[Path] = []
        try:
            tables = (list(shared.tables) if shared is not None else
                      early.tables.complete(digests) if early.tables is not None else [])
            run_tables = RunTables(data.rows, digests, list(tables)) if data.rows else None
            if leak_doc and data.rows:
                tables.append(leakage_table(leak_doc))
            # The index names the transition figures before they are drawn; it is written once they are.
            names = transition_plot_names(ts, data.conditions) if drawing else []
            index_html = _index_html(site.ctx, data, tables, table_rows, early.plot_files, names, leak_doc)
            bars = write_transition_bars(ts, out / "plots", data.conditions) if drawing else []
        finally:
            transition_files: list[Path] = flows() + bars
        if [p.stem for p in transition_files if p.suffix == ".png"] != names:  # one function names both
            raise RuntimeError(f"the transition figures drawn ({transition_files}) are not the ones named {names}")
        written += early.plot_files + transition_files
    written += pages
    index = own.write("report/index.html", index_html, durable=False)
    written.append(index)
    return written, run_tables


def _index_html(ctx: PageContext, data: RunData, tables: list[Table], table_rows: list[dict[str, Any]],
                plot_files: list[Path], transition_names: list[str], leak_doc: dict[str, Any] | None) -> str:
    """The report's index: the run's header, every table, the figures (the transition figures by
    name) and the question table."""
    filters = {
        "condition": data.conditions, "dataset": sorted({r.dataset for r in data.rows}),
        "status": ["correct", "wrong", "invalid", "error"],
        "route": sorted({t["route"] for t in table_rows if t["route"]}),
    }
    return ctx.env.get_template("index.html.j2").render(
        nonce=ctx.nonce, run=ctx.header, tables=[_table_view(t) for t in tables], rows=table_rows,
        filters=filters,
        plots=[{"name": p.stem, "png": f"plots/{p.name}", "svg": f"plots/{p.stem}.svg"}
               for p in plot_files if p.suffix == ".png"],
        transition_plots=[{"name": name, "png": f"plots/{name}.png", "svg": f"plots/{name}.svg"}
                          for name in transition_names],
        leak_hits=len((leak_doc or {}).get("hits", [])))
