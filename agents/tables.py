"""Report tables: a titled grid with a note, and how a pipeline declares the tables of its own facts.

A pipeline lists its tables in `Pipeline.tables` (recruitment next to the panel, CLEAR's routes next
to CLEAR); the report (`experiments/analysis/report.py`) computes them from the run's result rows
after the tables every run has. A table builder reads rows through `ResultRow` and parses their
summaries with its pipeline's summary model, so it never guesses a row's origin from its keys.
"""

from __future__ import annotations

import csv
import html
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

OVERALL = "overall"


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]]
    note: str = ""
    keep: tuple[str, ...] = ()
    """Columns a narrow terminal shows longest, most important first (the first column is always
    shown). The others are left out right to left, then these from the end; CSV and markdown keep
    every column. Empty: the leading identifier columns (all cells text) are kept."""

    def csv(self) -> str:
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(self.columns)
        writer.writerows(self.rows)
        return buf.getvalue()

    @property
    def name(self) -> str:
        """The table's key in `Run.tables()` and its CSV's stem: the title up to any parenthesis,
        lower-case, words joined by underscores ("Cost per question" -> cost_per_question)."""
        return self.title.lower().split("(")[0].strip().replace(" ", "_").replace("-", "_")

    def to_pandas(self) -> object:
        """The grid as a pandas DataFrame (the `[pandas]` extra); the title and note are in `.attrs`."""
        try:
            import pandas  # optional: the [pandas] extra
        except ImportError:
            raise ImportError("Table.to_pandas needs pandas, which medpanel does not install by default: "
                              "pip install 'medpanel[pandas]'") from None
        df = pandas.DataFrame(self.rows, columns=self.columns)
        df.attrs.update(title=self.title, note=self.note)
        return df

    def _repr_html_(self) -> str:
        """How a notebook shows the table: its title, the grid and the note, every cell escaped."""
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r) + "</tr>" for r in self.rows)
        note = f"<p><small>{html.escape(self.note)}</small></p>" if self.note else ""
        return (f"<table><caption><b>{html.escape(self.title)}</b></caption><thead><tr>{head}</tr></thead>"
                f"<tbody>{body}</tbody></table>{note}")

    def markdown(self) -> str:
        lines = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |",
                 "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(_fmt(v) for v in r) + " |" for r in self.rows]
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines) + "\n"


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def pct(k: float, n: int) -> float:
    return 100.0 * k / n if n else 0.0


class ResultRow(Protocol):
    """What a table reads of a result row (the store's rows are these)."""

    @property
    def condition(self) -> str: ...
    @property
    def dataset(self) -> str: ...
    @property
    def qid(self) -> str: ...
    @property
    def gold(self) -> str: ...
    @property
    def correct(self) -> bool: ...
    @property
    def invalid(self) -> bool: ...
    @property
    def error(self) -> str | None: ...
    @property
    def summary(self) -> dict[str, object]: ...


TableBuilder = Callable[[Sequence[Any], list[str]], "Table | None"]
"""(result rows, conditions in report order) -> a table, or None when no row has its facts."""


@dataclass(frozen=True)
class TableSpec:
    build: TableBuilder
    late: bool = False
    """Placed after the run-wide tables (repeats, errors), where CLEAR's tables have always been."""
