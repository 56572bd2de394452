"""`medpanel scenarios` (the shipped scenarios, one line each) and `medpanel init NAME` (a new,
commented scenario file to edit).

The shipped scenarios are the checkout's `scenarios/` folder (or `./scenarios`, or `--dir`). Each
row: the file, its one-line description, the paper table it reproduces (`about.table`, else the
"Table N" its description or header comment names), its condition count (the scenario expanded as
a run would), and its calls per question (`about.calls_per_question`, a measured figure with its
source; `-` where none was measured: nothing is guessed).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table as RichTable
from rich.text import Text

from medpanel.experiments.cli.output import console
from medpanel.experiments.errors import UserError, read_text, special_kind
from medpanel.experiments.run.scenario.scenario import load_scenario
from medpanel.experiments.run.scenario.yamlfile import MAX_SCENARIO_BYTES
from medpanel.inputs import one_line

_TABLE = re.compile(r"\bTables?\s+\d+[A-Z]?(?:\s*(?:and|,|/)\s*\d+[A-Z]?)*")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")

HEADER = """\
# {name}: a medpanel scenario. Edit it, check it, run it:
#   medpanel validate {file}
#   medpanel run {file} --limit 5
# Blocks (docs/scenario-reference.md lists every key):
#   name / description   the run's name (a slug: runs/<name>-<stamp>/) and one line for the catalogue
#   pipeline             generalist | panel | calibrated | clear | baselines (or module:Class)
#   flags / variants     the condition grid: {{c: [0, 1]}} -> conditions c0 and c1
#   settings             the pipeline's own settings (rounds, turns, limits ...)
#   compare              condition pairs for the paired statistics
#   dataset              source sample | jsonl | medagentsbench | freetext | hf, path, subsets, limit
#   model                backend scripted | local | openai ..., name, base_url, temperature, seed
#   run                  workers, repeats, max_errors, budgets, tracker (mlflow | wandb)
"""

DEFAULT = """\
name: {name}
description: Generalist with and without the Challenger on the built-in sample questions.
pipeline: generalist
flags: {{c: [0, 1]}}            # c: the meta-level Challenger off / on
compare:
  - [c0, c1]                  # paired on the same questions
dataset:
  source: sample              # the built-in questions; jsonl / medagentsbench / hf for your own
  limit: 5                    # questions per subset (a seeded sample)
model:
  backend: scripted           # scripted: no model at all; local: the embedded SmolLM2; openai: an endpoint
run:
  workers: 2
  max_errors: 10
"""


def scenario_dir(given: Path | None = None) -> Path:
    if given is not None:
        return given
    here = Path.cwd() / "scenarios"
    return here if here.is_dir() else Path(__file__).resolve().parents[2] / "scenarios"


def _paper_table(text: str, about: str | None) -> str:
    if about:
        return about
    m = _TABLE.search(text)
    return m.group(0) if m else "-"


def first_sentence(text: str) -> str:
    """A description's first sentence (up to a full stop followed by a capital), on one line."""
    flat = " ".join(text.split())
    m = re.search(r"\.\s+(?=[A-Z])", flat)
    return flat[:m.start() + 1] if m else flat


def catalogue(root: Path) -> list[dict[str, str]]:
    """One row per scenario file of `root`: file, pipeline, description, paper table, conditions, calls."""
    if special_kind(root) or (root.exists() and not root.is_dir()):
        raise UserError("is not a folder. Pass --dir FOLDER (a folder of *.yaml scenarios)", file=str(root),
                        field="--dir")
    try:
        files = sorted(root.glob("*.yaml")) if root.is_dir() else []
    except OSError as exc:
        raise UserError(f"cannot list this folder ({exc.strerror or exc}). Check its permissions", file=str(root),
                        field="--dir") from None
    if not files:
        raise UserError(f"no scenario files (*.yaml) in {root}. Pass --dir FOLDER", field="--dir")
    rows = []
    for f in files:
        # Every cell is text from the file: shown without its terminal controls (`printable`).
        try:
            # Read once, checked first (a FIFO, a link to /dev/zero, Latin-1: one row saying so).
            text = read_text(f, what="scenario", max_bytes=MAX_SCENARIO_BYTES)
            head = "\n".join(line for line in text.splitlines() if line.startswith("#"))
            sc = load_scenario(f)
        except UserError as exc:
            rows.append({"file": one_line(f.name), "pipeline": "-", "description": one_line(f"(does not load: {exc})"),
                         "table": "-", "conditions": "-", "calls": "-"})
            continue
        about = sc.about
        rows.append({"file": one_line(f.name), "pipeline": one_line(sc.pipeline),
                     "description": one_line(sc.description) or "-",
                     "table": one_line(_paper_table(f"{sc.description}\n{head}", about.table if about else None)),
                     "conditions": str(len(sc.conditions())),
                     "calls": one_line((about.calls_per_question if about else None) or "-")})
    return rows


def markdown_table(rows: list[dict[str, str]]) -> str:
    """The catalogue as the README prints it: the description's first sentence per scenario."""
    lines = ["| scenario | pipeline | conditions | paper table | what it runs |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [f"`{r['file']}`", f"`{r['pipeline']}`", r["conditions"], r["table"], first_sentence(r["description"])]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def scenarios(
    folder: Annotated[Path | None, typer.Option("--dir", help="A folder of scenario files (default: scenarios/).")]
    = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print a markdown table (the README's).")] = False,
) -> None:
    """List the shipped scenarios: description, paper table, conditions, calls per question."""
    root = scenario_dir(folder)
    rows = catalogue(root)
    if markdown:
        print(markdown_table(rows))
        return
    # Text, not markup: a description's `[link=...]` or `[bold]` is shown as written.
    table = RichTable(title=Text(f"Scenarios in {one_line(str(root))}"), show_lines=False)
    for col in ("file", "description", "paper table", "conditions", "calls/question"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(*(Text(r[k]) for k in ("file", "description", "table", "conditions", "calls")))
    console.print(table)


def init(
    name: Annotated[str, typer.Argument(help="The new scenario's name (a slug); writes NAME.yaml.")],
    template: Annotated[str | None, typer.Option("--from", help="Start from a shipped scenario, e.g. ablation_2x2.")]
    = None,
    out: Annotated[Path | None, typer.Option("--out", help="The file to write (default ./NAME.yaml).")] = None,
) -> None:
    """Write a new scenario file with comments, ready to edit (never overwrites)."""
    stem = name[:-5] if name.endswith(".yaml") else name
    if not _NAME.match(stem):
        raise UserError(f"{name!r} is not a scenario name: use lower-case letters, digits, '-' and '_'", field="NAME")
    path = out or Path(f"{stem}.yaml")
    if path.exists():
        raise UserError(f"{path} exists: medpanel init never overwrites. Pick another NAME or --out", field="NAME")
    if template is None:
        body = DEFAULT.format(name=stem)
    else:
        src = scenario_dir() / f"{template.removesuffix('.yaml')}.yaml"
        if not src.is_file():
            known = ", ".join(p.stem for p in sorted(scenario_dir().glob("*.yaml")))
            raise UserError(f"no shipped scenario {template!r}. Use one of: {known}", field="--from")
        shipped = read_text(src, what="scenario", max_bytes=MAX_SCENARIO_BYTES)
        body, n = re.subn(r"(?m)^name:.*$", f"name: {stem}", shipped, count=1)
        if not n:
            body = f"name: {stem}\n{body}"
        body = f"# Made from {src.name} (medpanel init --from {template}).\n{body}"
    if not path.parent.is_dir():  # a mistyped folder is refused, not made
        raise UserError(f"the folder {path.parent} does not exist. Create it first, or choose another --out",
                        field="--out")
    try:
        with open(path, "x", encoding="utf-8") as fh:  # "x": a file that appeared meanwhile is kept
            fh.write(HEADER.format(name=stem, file=path) + body)
    except FileExistsError:
        raise UserError(f"{path} exists: medpanel init never overwrites", field="NAME") from None
    except OSError as exc:
        raise UserError(f"cannot write {path} ({exc.strerror or exc}). Choose another --out", field="--out") from None
    load_scenario(path)  # what was written loads as a scenario
    console.print(f"wrote {path}. Check it with: medpanel validate {path}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command()(scenarios)
    app.command()(init)
