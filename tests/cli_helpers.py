"""The real CLI run in the test's own process, as the console script runs it."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

import pytest

from medpanel.experiments.cli.main import main


def run_main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`medpanel ARGS` in this process: (exit code, stdout, stderr) as captured by pytest."""
    code: object = 0
    try:
        main(list(args))
    except SystemExit as done:
        code = done.code
    out, err = capsys.readouterr()
    return (code if isinstance(code, int) else 1) if code is not None else 0, out, err


def output_of(*argv: str) -> str:
    """`medpanel ARGV` in this process, which must succeed without a traceback: what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as exc:
            assert not exc.code, f"medpanel {' '.join(argv)} exited {exc.code}: {err.getvalue()}"
    assert "Traceback" not in err.getvalue()
    return out.getvalue()
