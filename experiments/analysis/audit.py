"""The retrieval leakage audit of a run: every passage in every transcript against its question.

Evidence is found generically: any transcript event whose `data` holds a list under `evidence`,
`documents` or `passages` (the curator's brief, CLEAR's web documents, a retriever's raw hits).
The detectors themselves live in `medpanel.retrieval.leakage`; this module only walks the run,
counts, and writes `report/leakage.json`, which the HTML viewer reads to flag questions.

Provenance (for upstream-source matches) comes from a `provenance` object on a question's line
in `questions.jsonl`, or from a JSONL file given with `--provenance` whose records name
`dataset`, `qid` and any of `pmid`, `pmcid`, `doi`, `url`, `title`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast

from medpanel.agents.tables import Table
from medpanel.experiments.analysis.digest import EVIDENCE_KEYS, Passage, RowDigest, passages_of, read_digests
from medpanel.experiments.errors import UserError, read_json, read_text
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.jsonline import lines_of
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import read_questions
from medpanel.retrieval.leakage import (
    DIRECT,
    DIRECT_KIND,
    UPSTREAM,
    UPSTREAM_KIND,
    LeakHit,
    QuestionProbe,
    Thresholds,
)

__all__ = ["EVIDENCE_KEYS", "LEAKAGE_FILE", "Audit", "audit_run", "evidence_items", "finish_audit", "leakage_table",
           "load_provenance", "read_leakage", "refresh_leakage", "reopen_audit", "write_leakage"]
LEAKAGE_FILE = "leakage.json"


def evidence_items(event: Mapping[str, object]) -> Iterator[tuple[str, int, Mapping[str, object]]]:
    """(key, index, item) for each passage-like dict an event carries in its data."""
    for p in passages_of([event]):
        yield p.key, p.index, p.item


def load_provenance(run_dir: Path, extra: Path | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    out = {key: rec["provenance"] for key, rec in read_questions(run_dir).items()
           if isinstance(rec.get("provenance"), dict)}
    if extra is not None:
        if not extra.exists():
            raise UserError("no such file. Give a JSONL file with dataset, qid and pmid/url/title per line",
                            file=str(extra), field="--provenance")
        text = read_text(extra, what="provenance file", fix="Give a UTF-8 JSONL file", field="--provenance")
        for n, line in enumerate(lines_of(text), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                key = (str(rec["dataset"]), str(rec["qid"]))
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise UserError(f"line {n} is not a JSON object with dataset and qid ({exc}). Fix or drop the line",
                                file=str(extra), field="--provenance") from None
            out[key] = {k: v for k, v in rec.items() if k not in ("dataset", "qid")}
    return out


@dataclass
class RowAudit:
    """One row's checked passages: how many, and each passage that hit with its hits."""

    passages: int = 0
    found: list[tuple[Passage, list[LeakHit]]] = field(default_factory=list)


def _key(row: Row) -> tuple[str, str, str, int]:
    return (row.condition, row.dataset, row.qid, row.repeat)


def _audit_row(d: RowDigest, probes: dict[tuple[object, ...], QuestionProbe],
               provenance: dict[tuple[str, str], dict[str, object]], th: Thresholds) -> RowAudit:
    out = RowAudit()
    if not d.passages:
        return out
    q = d.question
    # One probe per question (its n-grams are built once), as the agents saw it.
    pkey = (d.row.key, str(q.get("text", "")), repr(q.get("options")), repr(q.get("gold")))
    probe = probes.get(pkey)
    if probe is None:
        probe = probes[pkey] = QuestionProbe.from_question(q, provenance.get(d.row.key), th)
    for p in d.passages:
        out.passages += 1
        found = probe.check(p.item)
        if found:
            out.found.append((p, found))
    return out


class Audit:
    """The audit of one run, fed one digest at a time (`check`), so a reader that streams the
    transcripts (the HTML report's one pass) has each row's hits as it reads the row, then the
    whole document (`document`) once every row is checked."""

    def __init__(self, provenance: dict[tuple[str, str], dict[str, object]] | None = None,
                 thresholds: Thresholds | None = None) -> None:
        self.th = thresholds or Thresholds()
        self.provenance = provenance or {}
        self.probes: dict[tuple[object, ...], QuestionProbe] = {}
        self.audited: dict[tuple[str, str, str, int], tuple[RowDigest, RowAudit]] = {}

    def check(self, d: RowDigest) -> list[HitRecord]:
        """Check one row's passages; its hits, as the document lists them."""
        checked = _audit_row(d, self.probes, self.provenance, self.th)
        self.audited[_key(d.row)] = (d, checked)
        return [] if d.missing else _hits(d.row, checked)

    def checked(self, row: Row) -> RowAudit:
        """What `check` found in `row`'s passages (checked before)."""
        return self.audited[_key(row)][1]

    def keep(self, d: RowDigest, checked: RowAudit) -> None:
        """A row checked elsewhere (a report worker's `check`), counted as if checked here."""
        self.audited[_key(d.row)] = (d, checked)

    def document(self, rows: list[Row]) -> dict[str, Any]:
        """The leakage.json document of `rows` (each checked before), counted and listed in
        (dataset, qid, condition, repeat) order."""
        hits: list[HitRecord] = []
        cells: dict[tuple[str, str], dict[str, Any]] = defaultdict(
            lambda: {"questions": 0, "with_evidence": 0, "passages": 0, "direct_passages": 0,
                     "upstream_passages": 0, "direct_questions": 0, "upstream_questions": 0,
                     "by_detector": defaultdict(int)})
        for row in sorted(rows, key=lambda r: (r.dataset, r.qid, r.condition, r.repeat)):
            cell = cells[(row.dataset, row.condition)]
            cell["questions"] += 1
            d, checked = self.audited[_key(row)]
            if d.missing:
                continue
            kinds: set[str] = set()
            for _p, found in checked.found:
                passage_kinds = {h.kind for h in found}
                kinds |= passage_kinds
                cell["direct_passages"] += DIRECT_KIND in passage_kinds
                cell["upstream_passages"] += UPSTREAM_KIND in passage_kinds
                for h in found:
                    cell["by_detector"][h.detector] += 1
            hits += _hits(row, checked)
            cell["passages"] += checked.passages
            cell["with_evidence"] += checked.passages > 0
            cell["direct_questions"] += DIRECT_KIND in kinds
            cell["upstream_questions"] += UPSTREAM_KIND in kinds
        summary = []
        for (ds, cond), c in sorted(cells.items()):
            n = c["questions"]
            summary.append({"dataset": ds, "condition": cond, **{k: v for k, v in c.items() if k != "by_detector"},
                            "direct_rate": round(c["direct_questions"] / n, 4) if n else 0.0,
                            "upstream_rate": round(c["upstream_questions"] / n, 4) if n else 0.0,
                            "by_detector": dict(c["by_detector"])})
        return {"thresholds": asdict(self.th), "detectors": {DIRECT_KIND: list(DIRECT), UPSTREAM_KIND: list(UPSTREAM)},
                "provenance_items": len(self.provenance),
                "passages": sum(c["passages"] for c in cells.values()), "summary": summary, "hits": hits}


class HitFields(TypedDict):
    """A `LeakHit` as leakage.json lists it (`LeakHit.as_dict`: its dataclass fields)."""

    detector: str
    score: float
    threshold: float
    detail: str
    kind: str


class HitRecord(TypedDict):
    """One passage with leak hits, as leakage.json lists it and the question pages mark it."""

    condition: str
    dataset: str
    qid: str
    repeat: int
    event: int
    role: str
    step: str
    key: str
    index: int
    doc_id: str
    title: str
    url: str
    hits: list[HitFields]


def _hits(row: Row, checked: RowAudit) -> list[HitRecord]:
    out: list[HitRecord] = []
    for p, found in checked.found:
        item = p.item
        out.append({"condition": row.condition, "dataset": row.dataset, "qid": row.qid,
                    "repeat": row.repeat, "event": p.event, "role": p.role, "step": p.step, "key": p.key,
                    "index": p.index, "doc_id": str(item.get("doc_id") or item.get("id") or ""),
                    "title": str(item.get("title") or ""), "url": str(item.get("url") or ""),
                    "hits": [cast("HitFields", h.as_dict()) for h in found]})
    return out


def audit_run(run_dir: Path, rows: list[Row], *, provenance: dict[tuple[str, str], dict[str, object]] | None = None,
              thresholds: Thresholds | None = None,
              digests: Sequence[RowDigest] | None = None) -> dict[str, object]:
    """Check every passage of every transcript; returns the leakage.json document. `digests` (one
    per row, as `digest.read_digests` reads them) spares a second read of every transcript; without
    them the transcripts are read here, one at a time."""
    audit = Audit(provenance, thresholds)
    stream: Iterable[RowDigest] = digests if digests is not None else read_digests(run_dir, rows)
    for d in stream:  # checked in the order they are read
        audit.check(d)
    return audit.document(rows)


def leakage_table(doc: dict[str, Any]) -> Table:
    out = [[s["dataset"], s["condition"], s["questions"], s["with_evidence"], s["passages"], s["direct_questions"],
            round(100 * s["direct_rate"], 1), s["upstream_questions"], round(100 * s["upstream_rate"], 1)]
           for s in doc["summary"]]
    note = ("direct = the benchmark item itself (stem match, n-gram overlap, option list or gold text recovered); "
            "upstream = the item's source document (PMID/PMC/DOI/URL/title), expected of a good retriever. "
            "Rates are per question.")
    if not doc.get("provenance_items"):
        note += " No provenance was given, so upstream-source matches cannot be detected."
    return Table("Retrieval leakage audit", ["dataset", "condition", "questions", "with_evidence", "passages",
                                             "direct_hits", "direct_%", "upstream_hits", "upstream_%"], out,
                 note=note)


def write_leakage(run_dir: Path, doc: dict[str, object]) -> Path:
    text = json.dumps(doc, indent=1, ensure_ascii=False)
    return Confined(run_dir, private=False).write(f"report/{LEAKAGE_FILE}", text, durable=False)


def read_leakage(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / "report" / LEAKAGE_FILE
    if not path.is_file():
        return None
    doc = read_json(path, what="leakage report", fix="Delete it; medpanel audit writes it again")
    return doc if isinstance(doc, dict) else None


def refresh_leakage(run_dir: Path, rows: list[Row], *, provenance_file: Path | None = None,
                    thresholds: Thresholds | None = None,
                    digests: Sequence[RowDigest] | None = None) -> dict[str, Any]:
    """Audit the run again and write report/leakage.json.

    Without arguments the previous audit's provenance file and thresholds are reused, so
    rebuilding the HTML report after `medpanel audit --provenance FILE` keeps its upstream checks.
    """
    audit, provenance_file = reopen_audit(run_dir, provenance_file=provenance_file, thresholds=thresholds)
    stream: Iterable[RowDigest] = digests if digests is not None else read_digests(run_dir, rows)
    for d in stream:
        audit.check(d)
    return finish_audit(run_dir, audit, rows, provenance_file)


def reopen_audit(run_dir: Path, *, provenance_file: Path | None = None,
                 thresholds: Thresholds | None = None) -> tuple[Audit, Path | None]:
    """An audit with the previous one's provenance file and thresholds where none are given (see
    `refresh_leakage`), and the provenance file it reads."""
    prev = read_leakage(run_dir) or {}
    if provenance_file is None and prev.get("provenance_file") and Path(prev["provenance_file"]).is_file():
        provenance_file = Path(prev["provenance_file"])
    if thresholds is None and isinstance(prev.get("thresholds"), dict):
        known = set(Thresholds.__dataclass_fields__)
        thresholds = Thresholds(**{k: v for k, v in prev["thresholds"].items() if k in known})
    return Audit(load_provenance(run_dir, provenance_file), thresholds), provenance_file


def finish_audit(run_dir: Path, audit: Audit, rows: list[Row], provenance_file: Path | None) -> dict[str, Any]:
    """The document of an audit whose rows are all checked, written to report/leakage.json."""
    doc = audit.document(rows)
    doc["provenance_file"] = str(provenance_file.resolve()) if provenance_file is not None else None
    write_leakage(run_dir, doc)
    return doc
