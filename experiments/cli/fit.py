"""A report table at the terminal's width: columns are left out whole, never squeezed into slivers.

Rich fits a table that is too wide by narrowing every column until words break (a 19-column table at
80 columns becomes columns three characters wide). Here every column gets at least its natural
minimum, as rich measures it: the longest word of its header and of its cells (a cell of up to
`WHOLE_CELL` characters counts whole), and never under `MIN_COLUMN` characters. When the columns at
those widths do not fit, columns are left out (the table's `keep` says which stay longest) and the
caller prints which, and where the full table is: the CSV and markdown files keep every column.
The spare width then goes to the columns whose text would otherwise wrap.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table as RichTable
from rich.text import Text

from medpanel.agents.tables import Table

MIN_COLUMN = 4
"""No column is narrower than this, nor than the longest word in its header or cells."""
WHOLE_CELL = 16
"""A cell this short (a number, a CI "[-12.5, +37.5]", a slug) is never wrapped."""
_WIDE = 100_000
"""A width at which a table is measured at its natural size."""


@dataclass
class Fitted:
    table: RichTable
    widths: dict[str, int]
    """The shown columns' text widths (padding and borders excluded)."""
    dropped: list[str]
    """Columns left out, in the table's order."""


def cell_text(v: object) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def drop_order(t: Table) -> list[int]:
    """Column indices in the order they are left out: the unkept ones right to left, then the kept
    ones from the least important. The first column (what a row is about) is never left out."""
    kept = [t.columns.index(c) for c in t.keep if c in t.columns] or _identifiers(t)
    kept = list(dict.fromkeys([0, *kept]))
    others = [i for i in reversed(range(len(t.columns))) if i not in kept]
    return others + [i for i in reversed(kept) if i != 0]


def _identifiers(t: Table) -> list[int]:
    """The leading columns whose every cell is text (condition, dataset, role...): what a row is about."""
    out = []
    for i in range(len(t.columns)):
        if not t.rows or not all(isinstance(r[i], str) for r in t.rows):
            break
        out.append(i)
    return out or [0]


def fit(t: Table, console: Console, *, width: int | None = None, compact: bool = False) -> Fitted:
    """The rich table for `t` at `width` (the console's by default). `compact`: no borders (the run summary)."""
    width = width or console.width
    cells = [[cell_text(v) for v in row] for row in t.rows]
    options = console.options.update_width(_WIDE)
    need: list[int] = []
    want: list[int] = []
    for i, header in enumerate(t.columns):
        head = Measurement.get(console, options, Text(header))
        sizes = [Measurement.get(console, options, Text(r[i])) for r in cells]
        need.append(max(MIN_COLUMN, head.minimum,
                        *(m.maximum if m.maximum <= WHOLE_CELL else m.minimum for m in sizes)))
        want.append(max(need[-1], head.maximum, *(m.maximum for m in sizes)))
    shown = list(range(len(t.columns)))
    order = drop_order(t)
    widths = {i: need[i] for i in shown}
    used = _width(console, _build(t, cells, widths, compact))
    while used > width and len(shown) > 1:
        shown.remove(order.pop(0))
        widths = {i: need[i] for i in shown}
        used = _width(console, _build(t, cells, widths, compact))
    # The spare width goes, one character at a time, to the column furthest from its natural width.
    for _ in range(max(0, width - used)):
        short = max(shown, key=lambda i: want[i] - widths[i])
        if want[short] <= widths[short]:
            break
        widths[short] += 1
    return Fitted(_build(t, cells, widths, compact), {t.columns[i]: w for i, w in widths.items()},
                  [c for i, c in enumerate(t.columns) if i not in shown])


def _build(t: Table, cells: list[list[str]], widths: dict[int, int], compact: bool) -> RichTable:
    if compact:
        table = RichTable(box=None, padding=(0, 1, 0, 0), pad_edge=False, show_edge=False, header_style="bold")
    else:
        table = RichTable(box=box.HEAVY_HEAD)
    shown = sorted(widths)
    for i in shown:
        table.add_column(t.columns[i], width=widths[i], overflow="fold")
    for row in cells:
        table.add_row(*[Text(row[i]) for i in shown])
    return table


def _width(console: Console, table: RichTable) -> int:
    """The table's rendered width, borders and padding included, as rich measures it."""
    return Measurement.get(console, console.options.update_width(_WIDE), table).maximum


def dropped_note(fitted: Fitted, total: int, width: int, where: str) -> str:
    """One line under a table that lost columns: which, and where every column is."""
    shown = total - len(fitted.dropped)
    return (f"{shown} of {total} columns shown at {width} columns; left out: {', '.join(fitted.dropped)}. "
            f"Every column: {where}")
