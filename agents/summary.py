"""The facts a pipeline records about one question besides its answer: `Summary` and its format.

It sits in the data-model room, below the pipelines, so the channels and CLEAR's parts that fill a
summary, and the records and the report that read one, need not import the pipeline contract.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator
from pydantic_core.core_schema import ValidatorFunctionWrapHandler
from typing_extensions import Self  # typing.Self is 3.11+; the package supports 3.10


class Fact(BaseModel):
    """A nested fact of a summary (one sample, one vote, one team ...): typed, and stored as a
    summary stores its facts, the fields given, in the order declared (an unset optional field is
    left out, as the dict it replaces had no such key)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class BudgetSpent(Fact):
    """A question's budget (`budget_match`, `with_budget`) and what was spent of it."""

    by: str
    target: int
    reference: dict[str, Any]
    """Where the target came from, as the settings' budget gives it (run, condition, calls, tokens)."""
    spent_calls: int
    spent_tokens: int
    capped: bool
    """The sample cap stopped the question before its budget was spent."""


class Summary(BaseModel):
    """The facts a pipeline records about one question besides its answer (what the report reads).

    Pipelines extend it with typed fields, all optional (an error row has an empty summary), and
    build it as they go: `Summary(...)`, then `summary.field = value` (checked against the field's
    type) and `summary.add(channel_facts)`. A fact the model does not declare is refused, whether
    given to the model or assigned: `PanelSummary.model_validate({"recruted": 3})` is an error, not
    a stored typo. A row of the stored results is read with `view`, which keeps the facts the model
    declares (another pipeline's, or an older format's, are not this model's to read).

    In a record (a result row, a transcript) it carries `format_version`; `data()` is the facts
    alone, in the order the pipeline gave them, as `QuestionResult.summary` holds them.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    FORMAT_VERSION: ClassVar[int] = 1
    format_version: int = 0
    """The summary format the record was written in; 0 for records made before versions existed."""
    budget: BudgetSpent | None = None
    """The per-question budget the runner gave this question and what was spent of it, for pipelines
    that spend one."""
    requested_calls: int | None = None
    """Benchmark runs (`pipeline: benchmark`): the model calls the method asked for, cache hits and
    re-asks included, whichever pipeline answered (a seed condition runs another one)."""
    requested_tokens: int | None = None
    """Benchmark runs: the tokens of those calls (prompt + completion)."""
    critiques_screened: int | None = None
    """The Challenger's critiques that named an option as the answer (re-asked, then redacted if the
    rewrite still did); set by the runner from the events marked `answer_leak`, when there were any."""
    _order: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_order(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        model = handler(value)
        if isinstance(value, dict) and isinstance(model, Summary):
            model._order = list(value)
        return model

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name in type(self).model_fields and name not in self._order:
            self._order.append(name)  # an assigned fact comes after those given before it

    @classmethod
    def view(cls, facts: Mapping[str, object]) -> Self:
        """A stored summary (a row's, a transcript's) read as this model: the facts it declares."""
        fields = cls.model_fields  # once: a class attribute read through pydantic's descriptor each time
        return cls.model_validate({k: v for k, v in facts.items() if k in fields})

    def add(self, facts: Summary, *, without: Collection[str] = ()) -> Self:
        """Set the facts `facts` set (a channel's, an inner method's), in their order, but `without`."""
        for name in facts.data():
            if name not in without:
                setattr(self, name, getattr(facts, name))
        return self

    def data(self) -> dict[str, object]:
        """The facts that were set (not the version), in the order they were given."""
        dumped = self.model_dump(mode="json", exclude_unset=True, exclude={"format_version"})
        first = [k for k in self._order if k in dumped]
        return {k: dumped[k] for k in first} | {k: v for k, v in dumped.items() if k not in first}

    def record(self) -> dict[str, object]:
        """The summary as a record stores it: its format version, then the facts."""
        return {"format_version": self.FORMAT_VERSION, **self.data()}
