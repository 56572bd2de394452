"""Call-matched controls: per-question budgets measured from a reference run's own records.

`budget_match: {run: RUN_DIR, condition: SLUG, by: calls|tokens}` gives a sampling baseline (`sc`)
on each question the compute that SLUG spent on it in RUN_DIR. Compute is measured as *requested*:
calls are the reference row's `logical_calls` and tokens the usage of every call event of its
transcript, cache hits included, because a condition that shared a response cache with its
neighbours (c1r1 with c0r0 in a 2x2 run) still needed those calls, and a standalone run of it would
have paid for them. Several reference repeats: the mean over them, rounded half up. A reference row
that errored measured nothing complete, so that question gets no budget (an error row
`no_reference`, like a question the reference lacks).

The targets are read once, when the run is planned, and written into `run.json`, so a resume or a
worker on another machine uses exactly the same budgets even if the reference run has moved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medpanel.agents.pipelines.run import Resolved
from medpanel.agents.types import Question, QuestionResult
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario.scenario import BudgetMatch
from medpanel.experiments.run.store.rows import Row
from medpanel.experiments.run.store.rundir import load_record, open_store
from medpanel.experiments.run.store.transcript_log import record_path

Key = tuple[str, str]
FIX = ("First run the reference scenario (e.g. medpanel run scenarios/ablation_2x2.yaml), then pass its "
       "directory with --set budget_match.run=runs/<name>-<stamp>")


def _round(x: float) -> int:
    return int(x + 0.5)


@dataclass
class BudgetReference:
    run: str
    condition: str
    by: str
    calls: dict[Key, int] = field(default_factory=dict)
    tokens: dict[Key, int] = field(default_factory=dict)
    unusable: dict[Key, str] = field(default_factory=dict)
    """Questions the reference answered without a usable measurement, and why."""

    def budget_for(self, dataset: str, qid: str) -> dict[str, object] | str:
        """The `settings.budget` for one question, or the reason there is none."""
        key = (dataset, qid)
        if key not in self.calls:
            return self.unusable.get(key, "the reference run has no row for this question")
        calls, tokens = self.calls[key], self.tokens[key]
        return {"by": self.by, "target": calls if self.by == "calls" else tokens,
                "reference": {"run": self.run, "condition": self.condition, "calls": calls, "tokens": tokens}}

    def apply(self, resolved: Resolved, question: Question, repeat: int) -> Resolved | QuestionResult:
        """The condition with this question's budget in its settings, or an error result to store."""
        budget = self.budget_for(question.dataset, question.qid)
        if isinstance(budget, str):
            message = (f"no_reference: no budget from condition {self.condition!r} of {self.run}: {budget}. "
                       "Run the reference on the same questions (same dataset block), or drop budget_match")
            return QuestionResult(condition=resolved.plan.slug, dataset=question.dataset, qid=question.qid,
                                  gold=question.gold, repeat=repeat, error=message, error_kind="no_reference")
        return resolved.with_budget(budget)

    def to_json(self) -> dict[str, object]:
        return {"run": self.run, "condition": self.condition, "by": self.by,
                "questions": [[d, q, self.calls[(d, q)], self.tokens[(d, q)]] for d, q in sorted(self.calls)],
                "unusable": [[d, q, why] for (d, q), why in sorted(self.unusable.items())]}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> BudgetReference:
        ref = cls(run=doc["run"], condition=doc["condition"], by=doc["by"])
        for d, q, calls, tokens in doc["questions"]:
            ref.calls[(d, q)], ref.tokens[(d, q)] = int(calls), int(tokens)
        ref.unusable = {(d, q): why for d, q, why in doc.get("unusable", [])}
        return ref


def _requested_tokens(run_dir: Path, row: Row) -> int | None:
    path = record_path(run_dir, row.transcript)  # its file, or its record in a worker's log
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    usage = [e.get("usage") or {} for e in doc.get("events", []) if e.get("kind") == "call"]
    return sum(int(u.get("prompt_tokens", 0)) + int(u.get("completion_tokens", 0)) for u in usage)


def load_reference(spec: BudgetMatch, *, model: tuple[str, str] | None = None,
                   file: str = "scenario") -> BudgetReference:
    """Read the reference condition's per-question compute; every run-level problem is a `UserError`.

    `model` is this run's (backend, model name): a reference measured with another model is refused
    unless `allow_other_model` says so, since its calls and tokens are another model's behaviour.
    """
    run_dir = Path(spec.run).expanduser().resolve()
    meta_path = run_dir / "run.json"
    if not meta_path.is_file():
        raise UserError(f"{spec.run} is not a medpanel run directory (no run.json). {FIX}", file=file,
                        field="budget_match.run")
    record = load_record(run_dir, arg="budget_match.run")
    theirs = (record.model.backend or "", record.model.name or "")
    if model is not None and theirs != model and not spec.allow_other_model:
        raise UserError(f"the reference run {spec.run} used model {'/'.join(theirs)}, this scenario uses "
                        f"{'/'.join(model)}: its budgets measure another model. Use the reference's model, or set "
                        "budget_match.allow_other_model: true to match against it anyway", file=file,
                        field="budget_match.allow_other_model")
    slugs = record.slugs
    if spec.condition not in slugs:
        raise UserError(f"condition {spec.condition!r} is not in the reference run {spec.run}; its conditions are: "
                        f"{', '.join(slugs) or 'none'}. Set budget_match.condition to one of them", file=file,
                        field="budget_match.condition")
    store = open_store(run_dir, record)
    try:
        store.sync_transcripts()
        rows = [r for r in store.rows() if r.condition == spec.condition]
    finally:
        store.close()
    if not rows:
        raise UserError(f"the reference run {spec.run} has no finished question for condition {spec.condition!r}. "
                        f"Finish it first: medpanel run --resume {spec.run}", file=file, field="budget_match.run")
    ref = BudgetReference(run=str(run_dir), condition=spec.condition, by=spec.by)
    measured: dict[Key, list[tuple[int, int]]] = {}
    for r in sorted(rows, key=lambda r: (r.dataset, r.qid, r.repeat)):
        if r.error:
            ref.unusable.setdefault(r.key, f"the reference errored on this question ({r.error_kind})")
            continue
        tokens = _requested_tokens(run_dir, r)
        if tokens is None:
            ref.unusable.setdefault(r.key, f"the reference transcript {r.transcript} is missing or unreadable")
            continue
        measured.setdefault(r.key, []).append((r.logical_calls, tokens))
    for key, values in measured.items():
        ref.calls[key] = _round(sum(c for c, _ in values) / len(values))
        ref.tokens[key] = _round(sum(t for _, t in values) / len(values))
        ref.unusable.pop(key, None)  # another repeat measured it
    return ref
