"""A model's prices: US dollars per million tokens, direct and in a batch (`run.prices`, `models[].prices`).

Apart from the budgets that spend them (`budget.py`), so the scenario's run block reads them without
the model client's imports.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

BATCH_DISCOUNT = 0.5
"""A batch call's price as a share of the listed one, unless `batch_input`/`batch_output` say (OpenAI's)."""


class Price(BaseModel):
    """US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0)
    """$ per million prompt tokens."""
    output: float = Field(ge=0)
    """$ per million completion tokens."""
    cached_input: float | None = Field(default=None, ge=0)
    """Prompt tokens the endpoint's prompt cache served (`usage.prompt_tokens_details.cached_tokens`);
    unset prices them as ordinary input."""
    batch_input: float | None = Field(default=None, ge=0)
    """$ per million prompt tokens of a call a batch answered (`model.batch`); unset: half of `input`."""
    batch_output: float | None = Field(default=None, ge=0)
    """$ per million completion tokens of a batch call; unset: half of `output`."""

    @property
    def cached_rate(self) -> float:
        return self.input if self.cached_input is None else self.cached_input

    def rates(self, batch: bool = False) -> tuple[float, float, float]:
        """$ per million (prompt, cached prompt, completion) tokens of a direct or a batch call; a
        batch call's cached prompt tokens get the cached rate at the batch's discount on input."""
        if not batch:
            return self.input, self.cached_rate, self.output
        bi = BATCH_DISCOUNT * self.input if self.batch_input is None else self.batch_input
        bo = BATCH_DISCOUNT * self.output if self.batch_output is None else self.batch_output
        return bi, self.cached_rate * (bi / self.input) if self.input else bi, bo
