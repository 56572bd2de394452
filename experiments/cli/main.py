"""The `medpanel` command line: the app, its commands' registration, and the exit codes.

Exit codes: 0 done, 1 `audit --strict` found a leak (or a bug: the traceback is printed), 2 a user
mistake (one line, no traceback), 3 a run stopped before the end (resumable), 130 aborted.
"""

from __future__ import annotations

import sys

import typer

from medpanel.agents.model.backends import BackendError
from medpanel.agents.model.local_server import LocalModelError
from medpanel.experiments.cli import catalogue, inspect, run
from medpanel.experiments.cli.corpus import corpus_app
from medpanel.experiments.cli.output import error_line
from medpanel.experiments.errors import UserError

# Shell completion is typer's own: `medpanel --install-completion` / `--show-completion`.
app = typer.Typer(add_completion=True, no_args_is_help=True, rich_markup_mode=None,
                  help="LLM specialist panels with a Challenger, recruitment and evidence adjudication.")
run.register(app)
inspect.register(app)
catalogue.register(app)
app.add_typer(corpus_app, name="corpus", help="Ingest, list and search retrieval corpora.")


def _usage_error_types() -> tuple[type[Exception], ...]:
    """The exception classes a command-line usage mistake arrives as.

    Older typer raises click's own `click.ClickException`s; recent releases (0.29 here) vendor click
    and raise `typer._click.exceptions.ClickException`, a subclass of the public `typer.TyperException`. Both
    carry `format_message()` and `exit_code`; catching both keeps usage errors one line whichever
    typer the environment resolved (pyproject allows `typer>=0.12`).
    """
    types: list[type[Exception]] = []
    vendored = getattr(typer, "TyperException", None)
    if isinstance(vendored, type) and issubclass(vendored, Exception):
        types.append(vendored)
    try:
        import click
    except ImportError:  # a typer that vendors click need not have it installed
        pass
    else:
        types.append(click.ClickException)
    return tuple(types)


def _usage_line(exc: Exception) -> str:
    """`Invalid value for '--limit': ...` plus where to read the usage, on one line."""
    msg = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    msg = msg.replace("Value error, ", "").rstrip(".")
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "medpanel"
    return f"{msg}. See: {path} --help"


def fail(message: str, code: int = 2) -> None:
    """One `error:` line on stderr, then exit."""
    error_line(message)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """The `medpanel` console script. Exit codes: 0 done, 2 a user mistake (one line, no traceback),
    3 a run stopped before the end (resumable), 130 aborted."""
    usage_errors = _usage_error_types()
    try:
        rc = app(args=argv, prog_name="medpanel", standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except UserError as exc:
        fail(str(exc), exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except usage_errors as exc:
        fail(_usage_line(exc), 2)
    except Exception as exc:
        if isinstance(exc, BackendError | LocalModelError):
            fail(str(exc), 2)
        if isinstance(exc, OSError):
            # The OS refused a path or a device the user gave (a folder where a file was expected, a
            # full disk, a permission): the path and the OS's reason are the line.
            where = f"{exc.filename}: " if exc.filename is not None else ""
            fail(f"{where}{exc.strerror or exc}. Check the path, its permissions and free space", 2)
        raise

