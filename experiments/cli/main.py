"""The `medpanel` command line: the app, its commands' registration, and the exit codes.

Exit codes: 0 done, 1 `audit --strict` found a leak (or a bug: the traceback is printed), 2 a user
mistake (one line, no traceback), 3 a run stopped before the end (resumable), 130 aborted.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

import typer

from medpanel.agents.model.errors import BackendError, LocalModelError
from medpanel.experiments.cli import streams
from medpanel.experiments.cli.lazy import LazyGroup
from medpanel.experiments.errors import UserError, error_line
from medpanel.inputs import InputFileError

# The commands are loaded when one is resolved (cli/lazy.py: `medpanel --help` and completion stay
# fast); `register(app)` in each command module is what adds them.
# Shell completion is typer's own: `medpanel --install-completion` / `--show-completion`.
app = typer.Typer(cls=LazyGroup, add_completion=True, no_args_is_help=True, rich_markup_mode=None,
                  help="LLM specialist panels with a Challenger, recruitment and evidence adjudication.")


@app.callback()
def _root() -> None:
    """LLM specialist panels with a Challenger, recruitment and evidence adjudication."""
    # Typer needs a callback or a command at build time; the commands themselves come lazily.


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


def _cut_off() -> None:
    streams.cut_off()
    fail("standard output was closed by the program reading it (as | head does): the rest was not printed. "
         "Read the whole output, or write it to a file", 2)


def main(argv: list[str] | None = None) -> None:
    """The `medpanel` console script. Exit codes: 0 done, 2 a user mistake (one line, no traceback),
    3 a run stopped before the end (resumable), 130 aborted."""
    if streams.prepare():
        fail("standard output is closed (started with >&- or without one), so nothing could be shown. Run it with "
             "stdout open, or with > /dev/null to discard what it prints", 2)
    usage_errors = _usage_error_types()
    try:
        rc = app(args=argv, prog_name="medpanel", standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except UserError as exc:
        fail(str(exc), exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except SystemExit as exc:
        if exc.code == 1 and streams.reader_gone():  # typer's own exit on EPIPE, without a word
            _cut_off()
        raise
    except typer.Abort:
        sys.exit(130)
    except usage_errors as exc:
        fail(_usage_line(exc), 2)
    except BrokenPipeError:
        _cut_off()
    except InputFileError as exc:
        fail(str(exc), 2)
    except Exception as exc:
        if isinstance(exc, BackendError | LocalModelError):
            fail(str(exc), 2)
        if isinstance(exc, OSError):
            # The OS refused a path or a device the user gave (a folder where a file was expected, a
            # full disk, a permission): the path and the OS's reason are the line.
            where = f"{exc.filename}: " if exc.filename is not None else ""
            fail(f"{where}{exc.strerror or exc}. Check the path, its permissions and free space", 2)
        raise



def _code(exc: SystemExit) -> int:
    """The status `sys.exit(x)` gives the interpreter: None 0, an int itself, anything else printed and 1."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    sys.stderr.write(f"{exc.code}\n")
    return 1


def entry() -> None:
    """The process entry point (the `medpanel` console script, `python -m medpanel`): `main`, then
    the process leaves at once, without the interpreter's teardown (freeing every module of the
    runner and the analysis, 0.7-1.6 s after the last line printed). What the process owed is done
    by then: the commands close their stores, child processes, trackers and temporary folders in
    their own `finally` blocks. What the interpreter would still do before its teardown is done
    here, in its order: wait for the threads that are not daemons, run the `atexit` functions
    (libraries' own), flush the output. Only this entry point leaves so: `main` itself returns or
    raises as always (tests call it, and `CliRunner` runs the app, in their own process)."""
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = _code(exc)
    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's own wait for its threads
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120  # as the interpreter ends when it cannot flush what was printed
    os._exit(code)
