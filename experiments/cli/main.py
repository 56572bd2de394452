"""The `medpanel` command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table as RichTable
from rich.text import Text

from medpanel.experiments.errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="LLM specialist panels with a Challenger, recruitment and evidence adjudication.")
# Piped output (CI logs, `| tee`) would otherwise wrap tables at 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)


def _corpus_app() -> None:
    if any(group.name == "corpus" for group in app.registered_groups):
        return  # main() may run many times in one process (tests, notebooks)
    try:
        from medpanel.experiments.cli.corpus import corpus_app
    except ImportError:  # the retrieval extra's CLI is optional at import time
        return
    app.add_typer(corpus_app, name="corpus", help="Ingest, list and search retrieval corpora.")


def print_table(t: Any) -> None:
    table = RichTable(title=t.title, title_justify="left", show_lines=False)
    for col in t.columns:
        table.add_column(col, overflow="fold")
    for row in t.rows:
        table.add_row(*[Text(f"{v:.2f}" if isinstance(v, float) else str(v)) for v in row])
    console.print(table)
    if t.note:
        console.print(Text(t.note, style="dim"))


def summarise(run_dir: Path, *, write: bool = True) -> None:
    from medpanel.experiments.analysis.report import build_tables, write_report
    from medpanel.experiments.run.rundir import load_meta, open_store

    meta = load_meta(run_dir)
    store = open_store(run_dir, meta)
    store.sync_transcripts()  # shared storage: other machines' transcripts become files here
    rows = store.rows()
    store.close()
    if not rows:
        console.print("No finished questions yet.")
        return
    from medpanel.experiments.analysis.header import header_lines
    from medpanel.experiments.analysis.protocol import protocol_line

    sc = meta.get("scenario", {})
    # The header says what was run and how it departs from the papers before any number is read.
    console.print(Text.assemble(("scenario ", "bold"), str(sc.get("name", meta.get("name", ""))),
                                f": {sc['description']}" if sc.get("description") else ""))
    console.print(Text(f"protocol: {protocol_line(sc)}"))
    for line in header_lines(meta):
        console.print(line, markup=False, highlight=False)
    tables = build_tables(rows, meta)
    for t in tables:
        print_table(t)
    errors = sum(1 for r in rows if r.error)
    if errors:
        console.print(f"{errors} of {len(rows)} pairs are error rows (no answer; scored wrong, and a resume skips "
                      f"them). Re-run them with: medpanel run --resume {run_dir} --retry-errors", markup=False)
    if write:
        try:
            paths = write_report(run_dir, tables)
        except OSError as exc:  # a full disk or a read-only folder: the tables above still stand
            error_line(f"cannot write the report to {exc.filename or run_dir / 'report'}: {exc.strerror or exc}")
            return
        console.print(f"Tables written to {paths[-1].parent}/ ({len(paths)} files)")


@app.command()
def validate(scenario: Annotated[Path, typer.Argument(help="Scenario YAML file.")],
             limit: Annotated[int | None, typer.Option(help="Questions per subset.")] = None,
             set_: Annotated[list[str] | None, typer.Option("--set", help="Override a key: settings.rounds=1")] = None,
             ) -> None:
    """Check a scenario and print its conditions and question count."""
    from medpanel.experiments.run.plan import make_plan
    from medpanel.experiments.run.scenario import load_scenario

    sc = load_scenario(scenario, set_)
    plan = make_plan(sc, base_dir=scenario.parent, limit=limit, file=str(scenario))
    console.print(f"[bold]{sc.name}[/bold]: pipeline {sc.pipeline}, model {sc.model.backend}"
                  f"{'/' + sc.model.model_name if sc.model.model_name else ''}")
    console.print(f"conditions ({len(plan.conditions)}): {', '.join(c.slug for c in plan.conditions)}")
    by_ds: dict[str, int] = {}
    for q in plan.questions:
        by_ds[q.dataset] = by_ds.get(q.dataset, 0) + 1
    console.print(f"questions ({len(plan.questions)}): " + ", ".join(f"{k} {v}" for k, v in by_ds.items()))
    console.print(f"pairs: {len(plan.pairs)} (x{plan.repeats} repeats), shard size {plan.shard_size}")


@app.command()
def run(
    scenario: Annotated[Path | None, typer.Argument(help="Scenario YAML file.")] = None,
    resume: Annotated[Path | None,
                      typer.Option("--resume", help="Finish the missing pairs of a run directory.")] = None,
    limit: Annotated[int | None, typer.Option(help="Questions per subset (overrides dataset.limit).")] = None,
    workers: Annotated[int | None, typer.Option(help="Parallel workers (overrides run.workers).")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Directory for this run.")] = None,
    repeat: Annotated[int | None, typer.Option("--repeat", help="Runs per condition with different seeds.")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    max_calls: Annotated[int | None, typer.Option(help="Halt after this many model requests.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Halt after this many tokens.")] = None,
    max_cost_usd: Annotated[float | None, typer.Option(help="Halt at this spend (needs run.prices).")] = None,
    max_errors: Annotated[int | None, typer.Option(help="Halt when more questions than this errored.")] = None,
    max_wall_s: Annotated[float | None, typer.Option(help="Halt this session after this many seconds.")] = None,
    rpm: Annotated[float | None, typer.Option(help="Requests per minute, shared by all workers.")] = None,
    storage: Annotated[str | None, typer.Option(help="Study storage URL, e.g. postgresql://user@host/db.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a scenario key, e.g. "
                                                   "settings.rounds=1 (repeatable).")] = None,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="With --resume: run the pairs that have "
                                               "error rows again; each new result replaces its error row.")] = False,
) -> None:
    """Run a scenario (or resume a run) and print the summary table."""
    from medpanel.experiments.run.plan import make_plan
    from medpanel.experiments.run.runner import Runner
    from medpanel.experiments.run.scenario import DatasetSpec, RunSpec, check_cost_budget, load_scenario, updated
    from medpanel.experiments.run.state import Tally

    if (scenario is None) == (resume is None):
        raise UserError("give a scenario file or --resume RUN_DIR (not both). Example: medpanel run "
                        "scenarios/quickstart.yaml", field="SCENARIO")
    session = {"workers": workers, "max_calls": max_calls, "max_tokens": max_tokens, "max_cost_usd": max_cost_usd,
               "max_errors": max_errors, "max_wall_s": max_wall_s, "requests_per_minute": rpm}
    # Every override meets the bounds of the scenario key it replaces before anything is read or made.
    updated(RunSpec(), {**session, "repeats": repeat, "storage": storage}, block="run")
    updated(DatasetSpec(), {"limit": limit}, block="dataset")
    if retry_errors and resume is None:
        raise UserError("--retry-errors re-runs the error rows of an existing run: use it with --resume RUN_DIR",
                        field="--retry-errors")
    if resume is not None:
        for option, value in (("--limit", limit), ("--repeat", repeat), ("--storage", storage),
                              ("--run-dir", run_dir), ("--set", set_)):
            if value:
                raise UserError(f"{option} cannot change a run that exists (its questions and grid are fixed). "
                                "Start a new run with it instead", field=option)
        runner = Runner.open(resume)
        runner.retry_errors = retry_errors
    else:
        assert scenario is not None
        sc = load_scenario(scenario, set_)
        sc = sc.model_copy(update={"run": updated(sc.run, {"storage": storage}, block="run")})
        plan = make_plan(sc, base_dir=scenario.parent, limit=limit, repeats=repeat, workers=workers,
                         file=str(scenario))
        runner = Runner.create(plan, run_dir=run_dir, scenario_file=str(scenario))
    runner.override(**session)
    check_cost_budget(runner.plan.scenario.run, field="--max-cost-usd" if max_cost_usd else "run.max_cost_usd")
    total = len(runner.plan.pairs)
    console.print(f"run directory: {runner.run_dir}")
    console.print(f"{len(runner.plan.conditions)} conditions x {len(runner.plan.questions)} questions"
                  f"{f' x {runner.plan.repeats} repeats' if runner.plan.repeats > 1 else ''} = {total} pairs, "
                  f"{runner.plan.scenario.run.workers} workers, model {runner.plan.scenario.model.backend}")
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("acc {task.fields[acc]}  invalid {task.fields[invalid]}  errors {task.fields[errors]}  "
                          "calls {task.fields[calls]} (+{task.fields[hits]} cached)  tokens {task.fields[tokens]}"
                          "{task.fields[cost]}"),
               TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=console, disable=quiet, transient=False) as progress:
        task = progress.add_task("questions", total=total, acc="-", invalid=0, errors=0, calls=0, hits=0, tokens=0,
                                 cost="")
        priced = bool(runner.plan.scenario.run.prices)

        def hook(t: Tally, _total: int) -> None:
            progress.update(task, completed=t.done, acc=f"{100 * t.correct / max(t.done, 1):.1f}%",
                            invalid=t.invalid, errors=t.errors, calls=t.calls, hits=t.cache_hits, tokens=t.tokens,
                            cost=f"  ${t.cost_usd:.4f}" if priced else "")

        hook(runner.tally, total)
        status = runner.run(progress=hook)
    summarise(runner.run_dir)
    if status.get("status_error"):
        error_line(str(status["status_error"]))
    if status["state"] != "complete":
        reason = f"{status['reason']}. " if status["reason"] else ""
        console.print(f"Run {status['state']}: {reason}{status['remaining']} pairs left. "
                      f"Resume with: medpanel run --resume {runner.run_dir}", style="yellow", markup=False,
                      soft_wrap=True)
        raise typer.Exit(3)
    console.print(f"Done. Transcripts: {runner.run_dir / 'transcripts'}. "
                  f"Read one with: medpanel show {runner.run_dir} <QID>")


@app.command()
def worker(
    target: Annotated[str, typer.Argument(help="A run directory, or the run's postgresql:// storage URL.")],
    workers: Annotated[int | None, typer.Option(help="Parallel workers in this process.")] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Local folder for this worker's files.")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
) -> None:
    """Join a run whose storage is shared (PostgreSQL) from this process or machine."""
    from medpanel.experiments.run.runner import Runner
    from medpanel.experiments.run.scenario import RunSpec, updated
    from medpanel.experiments.run.store import is_shared

    updated(RunSpec(), {"workers": workers}, block="run")  # before connecting anywhere
    if "://" in target:
        if not is_shared(target):
            raise UserError("a worker needs shared storage (postgresql://...); for SQLite runs use "
                            "medpanel run --resume RUN_DIR", field="RUN_DIR_OR_URL")
        runner = Runner.join(target, run_dir)
    else:
        runner = Runner.open(Path(target))
        if not runner.shared:
            raise UserError(f"{target} keeps its study in SQLite, which one machine owns. Resume it with "
                            f"medpanel run --resume {target}, or start runs with run.storage: postgresql://...",
                            field="RUN_DIR_OR_URL")
    runner.override(workers=workers)
    console.print(f"worker {runner.owner} joining {runner.plan.scenario.name} ({len(runner.plan.pairs)} pairs)")
    status = runner.run(progress=None if quiet else _print_progress, install_signals=True)
    console.print(f"worker done: run {status['state']}, {status['remaining']} pairs left")


def _print_progress(t: Any, total: int) -> None:
    if t.done % 10 == 0 or t.done == total:
        console.print(f"{t.done}/{total} done, {t.errors} errors, {t.calls} calls")


@app.command()
def report(run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
           html: Annotated[bool, typer.Option("--html", help="Also write the HTML viewer, plots and leakage "
                                                            "audit.")] = False) -> None:
    """Print and write (report/*.csv, report.md; with --html the viewer and plots) the tables of a run."""
    summarise(run_dir)
    if html:
        from medpanel.experiments.cli.inspect import write_html_report

        paths = write_html_report(run_dir)
        console.print(f"HTML report: {run_dir / 'report' / 'index.html'} ({len(paths)} files)")


@app.command()
def show(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    qid: Annotated[str, typer.Argument(help="Question id, or dataset__qid.")],
    condition: Annotated[str | None, typer.Option("--condition", help="Only this condition slug.")] = None,
    full: Annotated[bool, typer.Option(help="Also print the messages sent with every call.")] = False,
) -> None:
    """Print a debate turn by turn, with parsed fields and tokens."""
    from medpanel.experiments.run.rundir import load_meta, open_store, read_transcript
    from medpanel.experiments.run.store import inside

    store = open_store(run_dir, load_meta(run_dir))
    try:
        store.sync_transcripts()
        rows = store.rows()
    finally:
        store.close()
    known = sorted({r.condition for r in rows})
    if condition is not None and condition not in known:
        raise UserError(f"no condition {condition!r} in this run. Its conditions are: {', '.join(known) or 'none'}",
                        field="--condition")
    # Ids are matched exactly, and each row says where its transcript is (older runs named them differently).
    matches = sorted((r for r in rows if qid in (r.qid, f"{r.dataset}__{r.qid}")
                      and (condition is None or r.condition == condition)),
                     key=lambda r: (r.condition, r.dataset, r.qid, r.repeat))
    if not matches:
        raise UserError(f"no transcript for {qid!r}{f' in condition {condition}' if condition else ''}. "
                        f"List the ids with: medpanel export {run_dir} --format csv", field="QID")
    for row in matches:
        path = inside(run_dir, row.transcript)
        if path is None or not path.is_file():
            console.print(f"{row.condition} {row.dataset}/{row.qid}: transcript {row.transcript} is missing",
                          markup=False)
            continue
        print_transcript(read_transcript(path), full=full)


def print_transcript(doc: dict[str, Any], *, full: bool = False) -> None:
    # Everything below comes from a model, a dataset or a corpus: it is printed as Text, never
    # parsed as rich markup (a "[/b]" in a question would otherwise crash the command, and a tag
    # meant as styling would be printed literally where markup is off).
    q = doc["question"]
    verdict = "ERROR" if doc.get("error") else "INVALID" if doc["invalid"] else "correct" if doc["correct"] else "wrong"
    head = Text.assemble((str(doc["condition"]), "bold"),
                         f"  {q['dataset']}/{q['qid']}  answer {','.join(doc['answer']) or '-'}  "
                         f"gold {','.join(doc['gold'])}  -> {verdict}   calls {doc['calls']}  tokens {doc['tokens']}")
    opts = "\n".join(f"  ({k}) {v}" for k, v in q["options"].items())
    console.print(head)
    console.print(Panel(Text(f"{q['text']}\n\n{opts}"), title="question", title_align="left"))
    for e in doc["events"]:
        where = f"r{e['round']}t{e['turn']}" if e.get("round") else ""
        tag = f"{e['kind']:<8} {e['role']:<11} {e['agent']:<22} {e['step']:<18} {where}"
        if e["kind"] == "call":
            usage = e.get("usage", {})
            meta = (f"tok {usage.get('prompt_tokens', 0)}+{usage.get('completion_tokens', 0)}  "
                    f"{e.get('latency_s', 0):.2f}s{'  cached' if e.get('cache_hit') else ''}"
                    f"{'  INVALID' if e.get('invalid') else ''}")
            body = json.dumps(e["parsed"], ensure_ascii=False, indent=1) if e.get("parsed") else e.get("content", "")
            if e.get("error"):
                body += f"\n[{e['error']}]"
            if full:
                body = "\n".join(f"<{m['role']}{':' + m['name'] if m.get('name') else ''}> {m['content']}"
                                 for m in e.get("messages", [])) + "\n---\n" + body
            console.print(Panel(Text(body), title=Text(f"{tag}  {meta}"), title_align="left",
                                border_style=_colour(e["role"])))
        else:
            data = f"  {json.dumps(e['data'], ensure_ascii=False)}" if e.get("data") else ""
            console.print(Text.assemble((tag, "bold"), f" {e.get('content', '')}{data}"))
    if doc.get("error"):
        console.print(Text(f"error: {doc['error']}"))


def _colour(role: str) -> str:
    return {"challenger": "red", "moderator": "magenta", "recruiter": "yellow", "selector": "cyan"}.get(role, "blue")


@app.command()
def runs(runs_dir: Annotated[Path, typer.Argument(help="Folder of run directories.")] = Path("runs")) -> None:
    """List run directories with their status."""
    from medpanel.experiments.run.rundir import load_meta
    from medpanel.experiments.run.runlock import lock_holder

    if not runs_dir.is_dir():
        what = "is a file, not a folder of runs" if runs_dir.exists() else "does not exist"
        raise UserError(f"{runs_dir} {what}. Runs are created by medpanel run", field="RUNS_DIR")
    table = RichTable(title=f"runs in {runs_dir}", title_justify="left")
    for col in ("run", "scenario", "model", "pairs", "state", "created"):
        table.add_column(col)
    damaged: list[UserError] = []
    for d in sorted(p for p in runs_dir.iterdir() if (p / "run.json").is_file()):
        try:
            meta = load_meta(d)
        except UserError as exc:  # list the others, then say which could not be read
            damaged.append(exc)
            table.add_row(d.name, "-", "-", "-", "damaged run.json", "-")
            continue
        status_path = d / "status.json"
        try:
            status = json.loads(status_path.read_text(encoding="utf-8")) if status_path.is_file() else {}
        except (OSError, ValueError):
            status = {"state": "unreadable status.json"}
        status = status if isinstance(status, dict) else {"state": "unreadable status.json"}
        status.setdefault("state", "killed")
        if lock_holder(d) is not None:
            status["state"] = "running"
        elif status.get("state") == "running":
            status["state"] = "killed"  # its session wrote "running" and never finished: resume it
        model = meta.get("model") if isinstance(meta.get("model"), dict) else {}
        table.add_row(d.name, meta["name"], f"{model.get('backend', '?')}/{model.get('name')}",
                      str(meta.get("n_pairs", "?")), f"{status['state']}"
                      + (f" ({status.get('remaining')} left)" if status.get("remaining") else ""),
                      str(meta.get("created", ""))[:19])
    console.print(table)
    if damaged:
        more = f" (and {len(damaged) - 1} more damaged run.json)" if len(damaged) > 1 else ""
        raise UserError(f"{damaged[0]}{more}")


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


def error_line(message: str) -> None:
    """Print one `error:` line on stderr. Newlines inside a message are folded, so every error is
    exactly one line whatever produced it (a pydantic message, an OS error)."""
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    sys.stderr.write(f"error: {line.removeprefix('error: ')}\n")
    sys.stderr.flush()


def fail(message: str, code: int = 2) -> None:
    """One `error:` line on stderr, then exit."""
    error_line(message)
    sys.exit(code)


def main(argv: list[str] | None = None) -> None:
    """The `medpanel` console script. Exit codes: 0 done, 2 a user mistake (one line, no traceback),
    3 a run stopped before the end (resumable), 130 aborted."""
    _corpus_app()
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
        from medpanel.agents.model.backends import BackendError
        from medpanel.agents.model.local_server import LocalModelError

        if isinstance(exc, BackendError | LocalModelError):
            fail(str(exc), 2)
        if isinstance(exc, OSError):
            # The OS refused a path or a device the user gave (a folder where a file was expected, a
            # full disk, a permission): the path and the OS's reason are the line.
            where = f"{exc.filename}: " if exc.filename is not None else ""
            fail(f"{where}{exc.strerror or exc}. Check the path, its permissions and free space", 2)
        raise


# The inspection commands (view, compare, export, audit) live in their own module.
from medpanel.experiments.cli.inspect import register as _register_inspect  # noqa: E402

_register_inspect(app)
