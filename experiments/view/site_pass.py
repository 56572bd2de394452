"""The HTML report's one pass over a run's transcripts, question by question, spread over processes.

The sorted questions are cut into contiguous chunks (`fanout`); whoever takes a chunk, a forked
worker or the parent, decodes each of its questions' transcripts whole, makes each row's digest and
audits its passages from that decoding, writes the question's page and drops the documents, as one
process always did. A worker sends back what the parent needs of its chunk: the digests (as
`digest_workers` encodes them), each row's audit, the index's rows and the names of the pages it
wrote. A damaged transcript ends its chunk there, with the pages written before it, and stops the
pass: the parent raises it once the chunks before it are in, so the error and the pages kept are
one process's.
"""

from __future__ import annotations

import pickle
import struct
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from medpanel.experiments.analysis import digest_workers
from medpanel.experiments.analysis.audit import Audit, RowAudit
from medpanel.experiments.analysis.digest import RowDigest, gc_paused, read_with_document
from medpanel.experiments.analysis.fanout import Done, chunk_bounds, fan_out, portable
from medpanel.experiments.analysis.report import RunTables
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.rundir import RunData, transcript_paths
from medpanel.experiments.run.store.store import Row
from medpanel.experiments.view.pages import PageContext, RowKey, page_name, question_page, row_key

_LENGTH = struct.Struct("<Q")


@dataclass
class PageChunk:
    """What one chunk of questions gave: its rows' digests and audits (none with shared digests),
    the index's rows, the pages written, and the error that stopped it."""

    digests: list[RowDigest]
    audits: list[RowAudit | None]
    table_rows: list[dict[str, Any]]
    pages: list[str]
    error: Exception | None = None


class SitePass:
    """One build's pass: the questions, what every page shares, and the digests made so far."""

    def __init__(self, data: RunData, own: Confined, audit: Audit | None, ctx: PageContext,
                 shared: RunTables | None) -> None:
        self.data, self.own, self.audit, self.ctx = data, own, audit, ctx
        self.digest_of: dict[RowKey, RowDigest] = {}
        self.shared = shared is not None
        for d in shared.digests if shared is not None else ():
            self.digest_of[row_key(d.row)] = d
            ctx.leaks[row_key(d.row)] = audit.check(d) if audit is not None else []
        by_q: dict[tuple[str, str], list[Row]] = defaultdict(list)
        for r in data.rows:
            by_q[r.key].append(r)
        self.by_q = by_q
        self.keys = sorted(by_q)
        self.path_of = transcript_paths(data.run_dir)

    def run(self, processes: int, meanwhile: Callable[[], None]) -> list[PageChunk]:
        """Every chunk's result in order, up to the one a damaged transcript stopped (included);
        `meanwhile` runs here, with the collector on, while the workers write pages."""
        with gc_paused():
            return fan_out(chunk_bounds(len(self.keys), processes), self.work, processes, encode=self.encode,
                           decode=self.decode, meanwhile=digest_workers.collecting(meanwhile))

    def work(self, bounds: tuple[int, int]) -> Done[PageChunk]:
        chunk = PageChunk([], [], [], [])
        try:
            for key in self.keys[bounds[0]:bounds[1]]:
                self._page(key, chunk)
        except Exception as exc:  # raised by the parent at its place in the order
            chunk.error = exc
            return Done(chunk, stop=True)
        return Done(chunk)

    def _page(self, key: tuple[str, str], chunk: PageChunk) -> None:
        docs: dict[RowKey, dict[str, Any] | None] | None = None
        if not self.shared:
            docs = {}
            for row in self.by_q[key]:
                path = self.path_of(row) if row.transcript else None
                doc, d = read_with_document(path, row, scoring=self.data.record.scoring)
                docs[row_key(row)], self.digest_of[row_key(row)] = doc, d
                self.ctx.leaks[row_key(row)] = self.audit.check(d) if self.audit is not None else []
                chunk.digests.append(d)
                chunk.audits.append(self.audit.checked(row) if self.audit is not None else None)
        html, rows_here = question_page(self.data, key, self.by_q[key], self.digest_of, self.ctx, docs=docs)
        del docs  # this question's documents: never more than one page's at a time
        name = page_name(*key)
        self.own.write(f"report/questions/{name}", html, durable=False)
        chunk.table_rows += rows_here
        chunk.pages.append(name)

    def take(self, chunk: PageChunk) -> None:
        """A chunk's digests and audits, as if made here."""
        for d, checked in zip(chunk.digests, chunk.audits, strict=True):
            self.digest_of[row_key(d.row)] = d
            if self.audit is not None and checked is not None:
                self.audit.keep(d, checked)

    @staticmethod
    def encode(chunk: PageChunk) -> bytes:
        digests = digest_workers.encode(chunk.digests)
        error = portable(chunk.error) if chunk.error is not None else None
        rest = pickle.dumps((len(chunk.digests), chunk.audits, chunk.table_rows, chunk.pages, error), protocol=5)
        return _LENGTH.pack(len(digests)) + digests + rest

    def decode(self, bounds: tuple[int, int], data: bytes) -> PageChunk:
        (n,) = _LENGTH.unpack_from(data)
        count, audits, table_rows, pages, error = pickle.loads(data[_LENGTH.size + n:])
        rows = [r for key in self.keys[bounds[0]:bounds[1]] for r in self.by_q[key]][:count]
        digests = digest_workers.decode(rows, data[_LENGTH.size:_LENGTH.size + n])
        return PageChunk(digests, audits, table_rows, pages, error)
