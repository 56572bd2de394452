"""Flat records for pandas: one per (condition, question, repeat).

Each record has every result-row field, the pipeline summary flattened to `summary.<key>`
(nested dicts become dotted keys), the final vote or decision (`final.<key>`), the answer
trajectory (`trajectory.*`: the letters and majority after each turn, the transition, the flip), the
leakage kinds found for it when the audit ran, and the question (text, options, multi-answer flag). JSONL keeps
lists and dicts as JSON values; CSV writes them as JSON strings so every cell is a scalar.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from medpanel.experiments.analysis.audit import read_leakage
from medpanel.experiments.analysis.digest import digest
from medpanel.experiments.analysis.trajectory import columns as trajectory_columns
from medpanel.experiments.run.store.rundir import RunData, load_run

FORMATS = ("jsonl", "csv")
BASE = ["run", "condition", "dataset", "qid", "repeat", "status", "answer", "gold", "correct", "invalid", "error",
        "error_kind", "calls", "logical_calls", "tokens", "latency_s", "transcript", "question_text", "options",
        "n_options", "multi_answer", "leak"]


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = value


def records(data: RunData) -> Iterator[dict[str, Any]]:
    leak_doc = read_leakage(data.run_dir) or {}
    leaks: dict[tuple[str, str, str, int], set[str]] = {}
    for h in leak_doc.get("hits", []):
        key = (h["condition"], h["dataset"], h["qid"], int(h["repeat"]))
        leaks.setdefault(key, set()).update(x["kind"] for x in h["hits"])
    order = {c: i for i, c in enumerate(data.conditions)}
    scoring = data.record.scoring
    for row in sorted(data.rows, key=lambda r: (order.get(r.condition, 99), r.dataset, r.qid, r.repeat)):
        found = data.transcript(row)
        doc = found or {}
        q = data.questions.get(row.key) or doc.get("question") or {}
        rec: dict[str, Any] = {
            "run": data.run_dir.name, "condition": row.condition, "dataset": row.dataset, "qid": row.qid,
            "repeat": row.repeat, "status": row.status, "answer": row.answer, "gold": row.gold,
            "correct": row.correct, "invalid": row.invalid, "error": row.error, "error_kind": row.error_kind,
            "calls": row.calls, "logical_calls": row.logical_calls, "tokens": row.tokens,
            "latency_s": row.latency_s, "transcript": row.transcript, "question_text": q.get("text", ""),
            "options": q.get("options", {}), "n_options": len(q.get("options") or {}),
            "multi_answer": bool(q.get("multi_answer", False)),
            "leak": ",".join(sorted(leaks.get((row.condition, row.dataset, row.qid, row.repeat), set()))),
        }
        for k, v in row.summary.items():
            _flatten(f"summary.{k}", v, rec)
        final = next((e for e in reversed(doc.get("events", [])) if e.get("kind") in ("vote", "decision")), None)
        if final is not None:
            for k, v in (final.get("data") or {}).items():
                _flatten(f"final.{k}", v, rec)
        # The letters after every turn, the transition and the decisive flip, so a
        # dataframe can re-derive the transition tables row by row.
        rec.update(trajectory_columns(digest(row, found, scoring=scoring).trajectory))
        yield rec


def columns(recs: list[dict[str, object]]) -> list[str]:
    extra = sorted({k for r in recs for k in r} - set(BASE))
    return BASE + [k for k in extra if k.startswith("summary.")] + [k for k in extra if not k.startswith("summary.")]


def _cell(v: object) -> object:
    if isinstance(v, dict | list | tuple):
        return json.dumps(v, ensure_ascii=False, sort_keys=isinstance(v, dict))
    return "" if v is None else v


def write_export(run_dir: Path, fmt: str, out: TextIO) -> int:
    """Write every record of a run to `out`; returns the number of records."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    recs = list(records(load_run(run_dir)))
    if fmt == "jsonl":
        for r in recs:
            out.write(json.dumps(r, ensure_ascii=False) + "\n")
    else:
        writer = csv.DictWriter(out, fieldnames=columns(recs), extrasaction="raise", restval="")
        writer.writeheader()
        for r in recs:
            writer.writerow({k: _cell(v) for k, v in r.items()})
    return len(recs)
