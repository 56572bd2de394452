"""A run as Inspect AI eval logs: one `.eval` file per condition and repeat, for `inspect view`.

The logs are built with inspect_ai's own models (`EvalLog`, `EvalSample`, `ChatMessage*`,
`ModelUsage`, `Score`) and written by its own writer (`inspect_ai.log.write_eval_log`), so any
tool that reads Inspect logs (`read_eval_log`, the viewer, inspect_evals' analyses) reads these.
inspect_ai is the optional extra `medpanel[inspect]`; it is imported only here, when asked for.

What maps where:
- a (condition, repeat) -> one `EvalLog`; its task is `<run name>/<condition>`, its epoch the repeat;
- a question -> an `EvalSample`: input (the question as the agents saw it), choices (option texts),
  target (the gold letters), output (the final letters), and one score `choice`: `C` correct,
  `I` wrong, `N` invalid or errored (Inspect's NOANSWER; its metadata names which);
- the question's transcript -> the sample's `events` (a `ModelEvent` per model call, an `InfoEvent` per
  note, vote, brief or recruitment; `inspect_events`), which the Transcript tab and
  `inspect_ai.analysis` (`messages_df`, `events_df`) read, and its `messages`: the question, then one
  card per transcript event naming the agent that spoke, for the Messages tab;
- each sample a uuid (stable across exports of the run) and its start and end (its first call's start,
  its last event); the log its samples' span;
- one model name, `backend/name` (`scripted/scripted`, `openai/gpt-4o-mini`), in `eval.model`,
  `model_usage` (sample and log) and every `ModelEvent`; tokens per medpanel role -> `role_usage`;
  both count the tokens sent, as medpanel's tables do: a reply from medpanel's response cache is a
  `cache="read"` event that keeps its usage but counts in neither (Inspect's rule for its own cache);
- run.json (scenario, plan, model, accommodations) and the git commit -> the log's metadata and
  `EvalSpec.revision`.
"""

from __future__ import annotations

import json
import re
import tempfile
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from medpanel.agents.prompting import format_question
from medpanel.agents.types import Question
from medpanel.experiments.analysis.inspect_events import Qualify, debate_messages, sample_events, spent, when
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.confined import Confined
from medpanel.experiments.run.store.files import safe_stem
from medpanel.experiments.run.store.records import RunRecord
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import RunData, load_run, load_transcript, transcript_path

SCORER = "choice"
INSTALL = "pip install 'medpanel[inspect]'"


def _inspect() -> Any:
    # inspect_ai is an optional extra (about 160 MB installed): only this export needs it.
    try:
        import inspect_ai.log as log
    except ImportError:
        raise UserError(f"--format inspect needs inspect_ai: {INSTALL}", field="--format") from None
    return log


def _value(row: Row) -> str:
    return "C" if row.status == "correct" else "I" if row.status == "wrong" else "N"


def _qualifier(record: RunRecord) -> Qualify:
    """Names a model as `backend/name`, the one form used in `eval.model`, `model_usage` and events.

    A transcript records the model's own name; its backend comes from the run's model blocks."""
    main = record.model
    backends = {str(m.get("name")): str(m.get("backend")) for m in record.models if m.get("name") and m.get("backend")}
    default = main.backend or "unknown"

    def qualify(name: str | None) -> str:
        name = name or main.name or "default"
        return f"{backends.get(name, default)}/{name}"

    return qualify


def _sample(data: RunData, row: Row, qualify: Qualify, config: Any, run_id: str) -> Any:
    from inspect_ai.log import EvalSample
    from inspect_ai.model import ModelOutput, ModelUsage
    from inspect_ai.scorer import Score

    path = transcript_path(data.run_dir, row)
    record = load_transcript(path) if path.is_file() else None  # a missing file: the row alone, still a sample
    events = record.events if record is not None else []
    asked = data.questions.get(row.key)
    question = Question.model_validate(asked) if asked else (
        Question.model_validate(record.question.model_dump()) if record is not None else None)
    text = format_question(question) if question and question.options else (question.text if question else "")
    # Stable across exports of the same run (a re-export is the same samples), and apart for two runs
    # that share a folder name (the run's creation time is part of the key).
    sample_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, json.dumps(
        ["medpanel", run_id, data.record.created, row.condition, row.dataset, row.qid, row.repeat])))
    built = sample_events(events, sample_uuid, qualify, config)
    usage: dict[str, ModelUsage] = {}
    for ev in built.events:
        if spent(ev):
            usage[ev.model] = usage.get(ev.model, ModelUsage()) + ev.output.usage
    answer = row.answer or ""
    output = ModelOutput.from_content(qualify(None), answer, error=row.error)
    gold = list(row.gold.split(",")) if row.gold else []
    score = Score(value=_value(row), answer=answer or None,
                  explanation=row.error or ("no valid answer" if row.invalid else None),
                  metadata={"status": row.status, "gold": row.gold})
    error = None
    if row.error:
        from inspect_ai._util.error import EvalError  # Inspect exports it only under its private path

        error = EvalError(message=row.error, traceback=row.error_kind or "", traceback_ansi=row.error_kind or "")
    started, completed = built.started, built.completed
    return EvalSample(
        id=f"{row.dataset}:{row.qid}", epoch=row.repeat + 1, uuid=sample_uuid, input=text,
        choices=list(question.options.values()) if question and question.options else None,
        target=gold if len(gold) != 1 else gold[0], messages=debate_messages(events, text, qualify, sample_uuid),
        events=built.events, output=output, scores={SCORER: score}, model_usage=usage, role_usage=built.role_usage,
        error=error, started_at=when(started).isoformat() if started else None,
        completed_at=when(completed).isoformat() if completed else None,
        total_time=round(completed - started, 3) if started and completed else row.latency_s,
        working_time=row.latency_s,
        metadata={"dataset": row.dataset, "qid": row.qid, "condition": row.condition, "repeat": row.repeat,
                  "status": row.status, "calls": row.calls, "logical_calls": row.logical_calls,
                  "tokens": row.tokens, "cost_usd": row.cost_usd, "summary": row.summary,
                  "transcript": row.transcript, "multi_answer": bool(question.multi_answer) if question else False})


def _log(data: RunData, condition: str, repeat: int, rows: list[Row]) -> Any:
    log = _inspect()
    from inspect_ai.model import GenerateConfig, ModelUsage

    record = data.record
    qualify = _qualifier(record)
    mm = record.model
    config = GenerateConfig(**({} if mm.temperature is None else {"temperature": mm.temperature}),
                            **({} if mm.seed is None else {"seed": mm.seed}))
    run_id = safe_stem(data.run_dir.name, data.run_dir.name)
    samples = [_sample(data, r, qualify, config, run_id) for r in rows]
    usage: dict[str, ModelUsage] = defaultdict(ModelUsage)
    calls: Counter[str] = Counter()
    for s in samples:
        for name, u in s.model_usage.items():
            usage[name] = usage[name] + u
        calls.update(e.model for e in s.events if e.event == "model")
    # the model that made most of this log's calls (a run can route roles to other models)
    model = calls.most_common(1)[0][0] if calls else qualify(None)
    n = len(rows)
    counts = {k: sum(r.status == k for r in rows) for k in ("correct", "wrong", "invalid", "error")}
    git = record.git
    revision = log.EvalRevision(type="git", origin="", commit=git.commit, dirty=git.dirty) if git.commit else None
    created = record.created or ""
    spec = log.EvalSpec(
        eval_id=safe_stem(f"{condition}-r{repeat}", run_id, condition, repeat), run_id=run_id, created=created,
        task=f"{record.name}/{condition}", task_id=condition,
        task_description=f"medpanel condition {condition} of run {data.run_dir.name}",
        solver=record.named_pipeline or "",
        dataset=log.EvalDataset(name=",".join(sorted({r.dataset for r in rows})), samples=n,
                                sample_ids=[f"{r.dataset}:{r.qid}" for r in rows]),
        model=model, model_base_url=mm.base_url,
        config=log.EvalConfig(epochs=record.repeats or 1), revision=revision,
        packages=dict(record.versions),
        metadata={"medpanel_run": data.run_dir.name, "condition": condition, "repeat": repeat,
                  "commit": git.commit, "dirty": git.dirty,
                  "config": record.model_dump(mode="json", exclude_unset=True)})
    accuracy = counts["correct"] / n if n else 0.0
    results = log.EvalResults(total_samples=n, completed_samples=n - counts["error"], scores=[log.EvalScore(
        name=SCORER, scorer=SCORER, scored_samples=n, unscored_samples=0,
        metrics={"accuracy": log.EvalMetric(name="accuracy", value=accuracy)},
        metadata={"counts": counts, "invalid_and_errors_count_as_wrong": True})])
    # the log's span is its samples' (a resumed run's condition spans both sessions)
    starts = [s.started_at for s in samples if s.started_at]
    ends = [s.completed_at for s in samples if s.completed_at]
    role_usage: dict[str, ModelUsage] = defaultdict(ModelUsage)
    for s in samples:
        for name, u in s.role_usage.items():
            role_usage[name] = role_usage[name] + u
    stats = log.EvalStats(started_at=min(starts) if starts else created, completed_at=max(ends) if ends else created,
                          model_usage=dict(usage), role_usage=dict(role_usage))
    status = "success" if (data.status or {}).get("state", "complete") == "complete" else "started"
    return log.EvalLog(eval=spec, status=status, results=results, stats=stats, samples=samples,
                       metadata={"medpanel_run": str(data.run_dir)})


def write_inspect_logs(run_dir: Path, out_dir: Path) -> list[Path]:
    """Write one Inspect log per (condition, repeat) of the run under `out_dir`; returns their paths."""
    log = _inspect()
    data = load_run(run_dir)
    groups: dict[tuple[str, int], list[Row]] = defaultdict(list)
    for r in data.rows:
        groups[(r.condition, r.repeat)].append(r)
    order = {c: i for i, c in enumerate(data.conditions)}
    # Inspect names logs `<created>_<task>_<id>.eval` and its viewer lists them by that name.
    stamp = re.sub(r"[^0-9A-Za-z+-]", "-", data.record.created or "") or "run"
    run = data.run_dir.name
    built = []
    for (cond, rep), rows in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1])):
        rows.sort(key=lambda r: (r.dataset, r.qid))
        # no "_" inside the task part: the viewer splits the name on it
        task = re.sub(r"[^0-9A-Za-z.+-]", "-", f"{run}-{cond}-r{rep}")[:80]
        built.append((out_dir / f"{stamp}_{task}_{safe_stem('', run, cond, rep).lstrip('-_')}.eval",
                      _log(data, cond, rep, rows)))
    try:  # the command line has checked the folder (`outputs`), or made report/inspect inside the run
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create {out_dir} ({exc.strerror or exc}). Choose another --out", field="--out") \
            from None
    folder = Confined(out_dir, "an output folder", private=False)  # written never through a link
    with tempfile.TemporaryDirectory(prefix="medpanel-inspect-") as tmp:
        for path, eval_log in built:  # every log is built before the first is written
            # Inspect writes a log to a path it opens itself: written aside, then moved in by `confined`.
            aside = Path(tmp) / path.name
            log.write_eval_log(eval_log, str(aside))
            folder.write(path.name, aside.read_bytes())
            aside.unlink()
    return [p for p, _ in built]
