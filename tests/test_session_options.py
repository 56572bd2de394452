"""The session's run options are one list (`scenario.SESSION_OPTIONS`): the `run:` keys they
override, the options `medpanel run` takes, and what a runner hands its child processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from medpanel.experiments.cli import run as cli_run
from medpanel.experiments.cli import run_session
from medpanel.experiments.run.execution import children, processes
from medpanel.experiments.run.scenario.runspec import CLI_OPTIONS, SESSION_OPTIONS, RunSpec, session_overrides


class _Overridden(Exception):
    pass


def test_every_session_option_is_a_run_key_and_reaches_child_processes() -> None:
    assert set(SESSION_OPTIONS) <= set(RunSpec.model_fields)
    assert SESSION_OPTIONS.items() <= CLI_OPTIONS.items()
    assert processes.SESSION_KEYS == tuple(SESSION_OPTIONS)
    assert processes.session_settings(RunSpec()).keys() == SESSION_OPTIONS.keys()


def test_medpanel_run_passes_every_session_option_to_the_runner(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # A resume with every session option given: the runner must be handed each, by its `run:` key.
    # An option added to SESSION_OPTIONS but not to the command is refused by typer here; one the
    # command takes but does not pass on is missing from `seen`.
    seen: dict[str, Any] = {}

    class FakeRunner:
        retry_errors = False

        @classmethod
        def open(cls, run_dir: Path) -> FakeRunner:
            return cls()

        def override(self, **values: Any) -> None:
            seen.update(values)
            raise _Overridden

    # The runner is imported by the commands' bodies (after the children are started), so it is
    # replaced there; the children `--processes 7` would start ahead are only counted.
    monkeypatch.setattr(run_session, "Runner", FakeRunner)
    started: list[int] = []
    monkeypatch.setattr(children, "prestart", lambda count, pipeline=None: started.append(count))
    app = typer.Typer()
    cli_run.register(app)
    argv = ["run", "--resume", str(tmp_path)]
    for option in SESSION_OPTIONS.values():
        argv += [option, "7"]  # within every key's bounds
    result = CliRunner().invoke(app, argv)
    assert isinstance(result.exception, _Overridden), result.output
    assert seen == dict.fromkeys(SESSION_OPTIONS, 7)
    assert started == [6]


def test_session_overrides_takes_exactly_the_session_keys() -> None:
    values = dict.fromkeys(SESSION_OPTIONS)
    assert session_overrides(**values) == values
    with pytest.raises(TypeError, match="missing \\['workers'\\]"):
        session_overrides(**{k: v for k, v in values.items() if k != "workers"})
    with pytest.raises(TypeError, match="unknown \\['repeats'\\]"):
        session_overrides(**values, repeats=2)
