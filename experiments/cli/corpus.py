"""`medpanel corpus ...`: ingest MedRAG JSONL, search a corpus, list corpora.

Mounted by the main CLI as a sub-app (`app.add_typer(corpus_app)`); also runs standalone
(`python -m medpanel.experiments.cli.corpus`). User mistakes print one line on stderr and exit 2,
here as well as through the main CLI, because each command converts its own errors.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from medpanel.experiments.cli.console import make_console
from medpanel.experiments.errors import UserError
from medpanel.inputs import one_line
from medpanel.retrieval import (
    IngestReport,
    RetrievalError,
    corpus_info,
    ingest,
    list_corpora,
    open_retriever,
)

corpus_app = typer.Typer(
    name="corpus",
    help="Ingest, search and list retrieval corpora ($MEDPANEL_HOME/corpora).",
    no_args_is_help=True,
    add_completion=False,
)


class RetrieverKind(str, enum.Enum):
    bm25 = "bm25"
    dense = "dense"
    hybrid = "hybrid"


@contextmanager
def _user_errors() -> Iterator[None]:
    """Turn known user mistakes into one stderr line and exit code 2 (no traceback)."""
    try:
        try:
            yield
        except RetrievalError as err:
            raise UserError(str(err)) from err
    except UserError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(UserError.exit_code) from None


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


def _summary(report: IngestReport) -> str:
    parts = [
        f"{report.name}: {report.n_docs} docs "
        f"({report.n_new} new, {report.n_updated} updated, {report.n_unchanged} unchanged"
        + (f", {report.n_duplicates} duplicate ids" if report.n_duplicates else "")
        + ")",
        f"{len(report.problems)} malformed lines skipped",
        f"read {report.seconds_read:.1f} s, BM25 {report.seconds_bm25:.1f} s",
    ]
    if report.dense:
        parts.append(f"dense: {report.n_embedded} embedded in {report.seconds_dense:.1f} s")
    return "; ".join(parts) + f" -> {report.path}"


@corpus_app.command("ingest")
def ingest_cmd(
    paths: Annotated[list[Path], typer.Argument(help="MedRAG JSONL files or folders of them.")],
    name: Annotated[str, typer.Option("--name", "-n", help="Corpus name (folder under $MEDPANEL_HOME/corpora).")],
    dense: Annotated[bool, typer.Option("--dense", help="Also embed into ChromaDB (needs medpanel[dense]).")] = False,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress bars.")] = True,
) -> None:
    """Ingest MedRAG JSONL (id, title, content, optional url/year/source); re-ingest upserts by id."""
    with _user_errors():
        report = ingest(paths, name, dense=dense, progress=progress)
    typer.echo(_summary(report))


@corpus_app.command("search")
def search_cmd(
    name: Annotated[str, typer.Argument(help="Corpus NAME or folder path.")],
    query: Annotated[str, typer.Argument(help="The query text.")],
    k: Annotated[int, typer.Option("-k", "--k", min=1, help="Number of passages.")] = 16,
    retriever: Annotated[RetrieverKind, typer.Option("--retriever", "-r", help="Retriever.")] = RetrieverKind.bm25,
) -> None:
    """Print the top-k passages with rank, score, id and title."""
    with _user_errors():
        hits = open_retriever(name, retriever.value).search(query, k)
        info = corpus_info(name)
    # Text from the corpus, shown as written: no markup read in it, its terminal controls escaped.
    table = Table(title=Text(one_line(f"{info.name}: {retriever.value}, k={k}")), title_justify="left")
    table.add_column("rank", justify="right")
    table.add_column("score", justify="right")
    table.add_column("id", overflow="fold")
    table.add_column("title", overflow="fold")
    for hit in hits:
        table.add_row(str(hit.rank), f"{hit.score:.3f}", Text(one_line(hit.doc_id)), Text(one_line(hit.title)))
    make_console().print(table)
    if not hits:
        typer.echo("no passage shares a term with the query", err=True)


@corpus_app.command("list")
def list_cmd() -> None:
    """Corpora under $MEDPANEL_HOME/corpora with document counts, disk size and dense status."""
    with _user_errors():
        corpora = list_corpora()
    if not corpora:
        typer.echo("no corpora yet. Create one with: medpanel corpus ingest PATH... --name NAME", err=True)
        return
    table = Table()
    for column, justify in (
        ("name", "left"),
        ("docs", "right"),
        ("disk", "right"),
        ("dense", "left"),
        ("updated", "left"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for info in corpora:
        dense = f"yes ({info.dense_model})" if info.dense else "no"
        updated = info.updated[:16].replace("T", " ")  # minutes are enough; keeps the table narrow
        table.add_row(Text(one_line(info.name)), str(info.n_docs), _human_bytes(info.disk_bytes), Text(one_line(dense)),
                      Text(one_line(updated)))
    make_console().print(table)


if __name__ == "__main__":
    corpus_app()
