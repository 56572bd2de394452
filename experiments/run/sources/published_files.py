"""Rows of the plain files benchmark publishers ship, where the `datasets` library would misread them.

- A CSV with a header (MedBullets' `medbullets_op5.csv`, AfriMed-QA's CSV, NEJM-QA's per-specialty
  CSVs). MedBullets' rows end in empty fields the header does not name; a CSV reader that trusts
  the header's width (pandas, and so `datasets`) shifts every column by them. Here the header
  names the columns, empty trailing fields are dropped and a non-empty one is refused.
- A TSV without a header (MedExQA's `<subject>_test.tsv`): the layout names its columns.
- A JSON object of objects keyed by id (PubMedQA's `ori_pqal.json` and the `test_set.json` its
  split script writes): each value is a row, its key the row's `id_column`.
- A folder of such files, one per subset (NEJM-QA's five specialties, MedExQA's five subjects):
  every file's rows, in file-name order, with the subset (the file's name less a `_<split>`
  suffix) in the column `FILE_COLUMN`.

Nothing here decides what a column means: the preset's mapping does (`hf_presets.py`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

from medpanel.experiments.errors import UserError
from medpanel.inputs import InputFileError, check_input

FILE_COLUMN = "_file"
"""The column holding a row's subset when a folder of files is read."""

KEY_COLUMN = "_key"
"""The column holding a keyed JSON row's key (PubMedQA's PMID) unless the layout names another."""

SUFFIXES = (".csv", ".tsv")


def is_keyed_json(path: Path) -> bool:
    """A `.json` file whose first non-blank character opens an object (not a JSON-lines file or a list)."""
    if path.suffix != ".json":
        return False
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip()
    return head.startswith(b"{") and not _one_object_per_line(path)


def _one_object_per_line(path: Path) -> bool:
    with path.open(encoding="utf-8", errors="replace") as fh:
        first = fh.readline().strip()
    try:
        obj = json.loads(first)
    except ValueError:
        return False
    # A whole object on the first line is JSON lines (read by `datasets`), unless it is a minified
    # keyed file: an object whose values are all records.
    return not (isinstance(obj, dict) and obj and all(isinstance(v, dict) for v in obj.values()))


def is_published_folder(path: Path) -> bool:
    """A folder of CSV/TSV files and no `save_to_disk` metadata."""
    if not path.is_dir() or any((path / n).exists() for n in ("dataset_info.json", "dataset_dict.json",
                                                             "state.json")):
        return False
    return any(p.suffix in SUFFIXES for p in path.iterdir())


def read_rows(path: Path, *, header: list[str] | None, split: str) -> list[dict[str, object]]:
    """Every row of a published CSV/TSV/keyed-JSON file, or of a folder of CSV/TSV files."""
    if path.is_dir():
        # Every CSV/TSV entry but a folder: a FIFO or a device named like one is refused, not skipped.
        files = sorted(p for p in path.iterdir() if p.suffix in SUFFIXES and not p.is_dir())
        rows: list[dict[str, object]] = []
        for f in files:
            subset = f.stem.removesuffix(f"_{split}")
            rows.extend({**r, FILE_COLUMN: subset} for r in _read_table(f, header))
        return rows
    if path.suffix == ".json":
        return _read_keyed(path)
    subset = path.stem.removesuffix(f"_{split}")  # one specialty's CSV names its rows' subset as a folder would
    return [{**r, FILE_COLUMN: subset} for r in _read_table(path, header)]


def _checked(path: Path) -> None:
    # A publisher's file is a user's file: regular, bounded and UTF-8 before a byte is parsed.
    try:
        check_input(path, what="dataset file", fix="Point dataset.path at the publisher's CSV, TSV or JSON file")
    except InputFileError as exc:
        raise UserError(exc.reason, file=exc.path, field="dataset.path") from None


def _read_keyed(path: Path) -> list[dict[str, object]]:
    _checked(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"is not valid JSON ({str(exc)[:120]}). Check the file", file=str(path),
                        field="dataset.path") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise UserError("is a JSON object whose values are not all records (objects). Point dataset.path at a "
                        "keyed file such as PubMedQA's ori_pqal.json or test_set.json", file=str(path),
                        field="dataset.path")
    return [{**v, KEY_COLUMN: k} for k, v in data.items()]


def _read_table(path: Path, header: list[str] | None) -> list[dict[str, object]]:
    _checked(path)
    delimiter = "\t" if path.suffix == ".tsv" else ","
    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:
            lines = list(csv.reader(fh, delimiter=delimiter))
    except (UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"cannot be read as {'TSV' if delimiter == chr(9) else 'CSV'} ({str(exc)[:120]}). Check the "
                        "file", file=str(path), field="dataset.path") from None
    lines = [line for line in lines if any(cell.strip() for cell in line)]
    if header is None:
        if not lines:
            return []
        header, lines = [c.strip() for c in lines[0]], lines[1:]
    out: list[dict[str, object]] = []
    for n, cells in enumerate(lines, start=1):
        extra = cells[len(header):]
        if any(c.strip() for c in extra):
            raise UserError(f"row {n} has {len(cells)} fields but the header names {len(header)}, and the extra ones "
                            "are not empty. Fix the row", file=str(path), field="dataset.path")
        if len(cells) < len(header):
            raise UserError(f"row {n} has {len(cells)} fields but the header names {len(header)} "
                            f"({', '.join(header)}). Fix the row", file=str(path), field="dataset.path")
        out.append(dict(zip(header, cells[:len(header)], strict=True)))
    return out
