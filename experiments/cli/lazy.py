"""The command group that imports a command's module only when that command runs.

Every command module pulls in the runner (AutoGen, openai) or the analysis (scipy, matplotlib):
seconds of imports. `medpanel --help`, a TAB of shell completion and `medpanel show` should not pay
for `medpanel run`'s imports, so the group knows each command's name and one-line help up front
(`COMMANDS`; tests/test_cli_startup.py checks they equal the commands' own) and imports the module
that defines it (its `register(app)`) when the command is resolved.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
import typer.core
import typer.main


@dataclass(frozen=True)
class LazyCommand:
    module: str
    """The module whose `register(app)` adds the command (or, with `app`, the attribute naming a sub-app)."""
    help: str
    """The command's one-line help, shown by `medpanel --help` and completion without the import."""
    app: str | None = None


COMMANDS: dict[str, LazyCommand] = {
    "validate": LazyCommand("medpanel.experiments.cli.run",
                            "Check a scenario and print its conditions and question count."),
    "run": LazyCommand("medpanel.experiments.cli.run",
                       "Run a scenario (or resume a run) and print a short summary (medpanel report prints every "
                       "table)."),
    "worker": LazyCommand("medpanel.experiments.cli.run",
                          "Join a run whose storage is shared (PostgreSQL) from this process or machine."),
    "report": LazyCommand("medpanel.experiments.cli.inspect",
                          "Print and write (report/*.csv, report.md; with --html the viewer and plots) the tables of "
                          "a run."),
    "show": LazyCommand("medpanel.experiments.cli.inspect",
                        "Print a debate turn by turn, with parsed fields and tokens."),
    "runs": LazyCommand("medpanel.experiments.cli.inspect", "List run directories with their status."),
    "view": LazyCommand("medpanel.experiments.cli.inspect",
                        "Serve the run's HTML report read-only on 127.0.0.1 (builds it first if missing)."),
    "compare": LazyCommand("medpanel.experiments.cli.inspect",
                           "Align questions by (dataset, qid) across runs and print accuracy, cost and paired tables."),
    "export": LazyCommand("medpanel.experiments.cli.inspect",
                          "One record per (condition, question, repeat) with every row, summary and question "
                          "field; or (--format inspect) one Inspect AI eval log per condition and repeat, for "
                          "`inspect view`."),
    "audit": LazyCommand("medpanel.experiments.cli.inspect",
                         "Check every retrieved passage for benchmark-item leakage and upstream-source retrieval."),
    "plan": LazyCommand("medpanel.experiments.cli.plan", "Questions each planned comparison needs, and the full "
                        "scenario's calls, tokens, USD and wall time."),
    "scenarios": LazyCommand("medpanel.experiments.cli.catalogue",
                             "List the shipped scenarios: description, paper table, conditions, calls per question."),
    "init": LazyCommand("medpanel.experiments.cli.catalogue",
                        "Write a new scenario file with comments, ready to edit (never overwrites)."),
    "corpus": LazyCommand("medpanel.experiments.cli.corpus", "Ingest, list and search retrieval corpora.",
                          app="corpus_app"),
}


def _completion_item(name: str, help: str) -> Any:
    # typer >= 0.29 vendors click and re-exports its CompletionItem in typer.core; older typer uses click's.
    cls: Any = getattr(typer.core, "CompletionItem", None)
    if cls is None:
        cls = importlib.import_module("click.shell_completion").CompletionItem
    return cls(name, help=help)


class LazyGroup(typer.core.TyperGroup):
    def _load(self, name: str) -> None:
        spec = COMMANDS[name]
        module = importlib.import_module(spec.module)  # the deferred import: see the module docstring
        sub = typer.Typer(add_completion=False, rich_markup_mode=None)
        if spec.app is not None:
            sub.add_typer(getattr(module, spec.app), name=name, help=spec.help)
        else:
            module.register(sub)
        for cmd_name, cmd in typer.main.get_group(sub).commands.items():
            self.commands.setdefault(cmd_name, cmd)

    _listing_off = False

    def list_commands(self, ctx: Any) -> list[str]:
        if self._listing_off:
            return []
        return list(dict.fromkeys([*COMMANDS, *super().list_commands(ctx)]))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self._load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def _short_help(self, name: str, limit: int) -> str:
        if name in self.commands or name not in COMMANDS:
            cmd = super().get_command(None, name)  # type: ignore[arg-type]
            return str(cmd.get_short_help_str(limit)) if cmd is not None else ""
        text = COMMANDS[name].help
        return text if len(text) <= limit else text[: max(limit - 3, 0)].rstrip() + "..."

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        with formatter.section("Commands"):
            formatter.write_dl([(n, self._short_help(n, limit)) for n in names])

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        """Command names and their help without importing a module; options as usual."""
        self._listing_off = True  # the parent's own listing would resolve (import) every command
        try:
            options = super().shell_complete(ctx, incomplete)
        finally:
            self._listing_off = False
        names = [n for n in self.list_commands(ctx) if n.startswith(incomplete)]
        return [_completion_item(n, self._short_help(n, 200)) for n in names] + options
