"""The facts a pipeline records about one question besides its answer: `Summary` and its format.

It sits in the data-model room, below the pipelines, so the channels and CLEAR's parts that fill a
summary, and the records and the report that read one, need not import the pipeline contract.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator
from pydantic_core.core_schema import ValidatorFunctionWrapHandler


class Summary(BaseModel):
    """The facts a pipeline records about one question besides its answer (what the report reads).

    Pipelines extend it with typed fields, all optional (an error row has an empty summary). In a
    record (a result row, a transcript) it carries `format_version`; `data()` is the facts alone,
    in the order the pipeline gave them, as `QuestionResult.summary` holds them.
    """

    model_config = ConfigDict(extra="allow")

    FORMAT_VERSION: ClassVar[int] = 1
    format_version: int = 0
    """The summary format the record was written in; 0 for records made before versions existed."""
    budget: dict[str, Any] | None = None
    """The per-question budget the runner gave this question (`budget_match`, `with_budget`) and what
    was spent of it, for pipelines that spend one: by, target, reference, spent_calls, spent_tokens."""
    _order: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _remember_order(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        model = handler(value)
        if isinstance(value, dict) and isinstance(model, Summary):
            model._order = list(value)
        return model

    def data(self) -> dict[str, Any]:
        """The facts that were set (not the version), in the order they were given."""
        dumped = self.model_dump(mode="json", exclude_unset=True, exclude={"format_version"})
        first = [k for k in self._order if k in dumped]
        return {k: dumped[k] for k in first} | {k: v for k, v in dumped.items() if k not in first}

    def record(self) -> dict[str, Any]:
        """The summary as a record stores it: its format version, then the facts."""
        return {"format_version": self.FORMAT_VERSION, **self.data()}
