"""Scenario files: YAML -> a validated `Scenario` -> the grid of `Condition`s it describes, and their slugs.

Validation is strict (`extra="forbid"` everywhere) because a misspelt key in a paid benchmark run
is worse than a refusal: every error names the file, the key path, the YAML line and the fix.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.types import Condition
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.scenario import axes
from medpanel.experiments.run.scenario.axes import ModelEntry, PromptRef, RoleModel
from medpanel.experiments.run.scenario.runspec import RunSpec
from medpanel.experiments.run.scenario.yamlfile import read_scenario
from medpanel.experiments.run.sources.dataset_parts import DatasetPart, PresetName
from medpanel.experiments.run.sources.references import References

# Flag order in slugs is fixed so `c1r0k1` means the same thing in every scenario and table.
FLAG_ORDER = ("c", "r", "k")

# Limits on what a scenario may hold. A scenario is a page of settings; these are orders of
# magnitude above any real one and keep a hostile or mistaken file (a pasted data set, a YAML alias
# bomb) from costing minutes of CPU and a copy in every run directory.
MAX_CONDITIONS = 1_024
"""Conditions one scenario may expand to (flag grid plus variants)."""

# -- condition slugs: `{c: 1, r: 0}` <-> `c1r0`, and a named variant (`c1r1k1-ind`, `between-gap`) as
# flags. A slug names a condition in every table, transcript path and store row, so both directions
# live beside the grid that makes them.


def slug_for(flags: dict[str, int | str], variant: str | None = None) -> str:
    """`{c: 1, r: 0}` -> `c1r0`; string-valued flags and a variant append as `-value`."""
    head = "".join(f"{k}{v}" for k, v in flags.items() if isinstance(v, int))
    tail = [str(v) for v in flags.values() if not isinstance(v, int)]
    if variant:
        tail.append(variant)
    return "-".join([head, *tail]) if head else "-".join(tail)


def condition_from_slug(slug: str, pipeline: str, settings: dict[str, object]) -> Condition:
    """Parse `c1r1k1-ind` back into flags plus a `variant` flag."""
    m = re.fullmatch(r"((?:[a-z]\d)+)(?:-([a-z0-9_-]+))?", slug)
    if not m:
        if re.fullmatch(r"[a-z][a-z0-9_-]*", slug):
            # A named condition the pipeline defines itself (e.g. `between-gap`, `upfront`).
            return Condition(slug=slug, pipeline=pipeline, flags={"variant": slug}, settings=settings)
        raise ValueError(f"variant {slug!r} is not a slug like c1r1k1-ind or a name like between-gap")
    flags: dict[str, int | str] = {p[0]: int(p[1]) for p in re.findall(r"[a-z]\d", m.group(1))}
    if m.group(2):
        flags["variant"] = m.group(2)
    return Condition(slug=slug, pipeline=pipeline, flags=flags, settings=settings)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # `.inf` would be stored as null


class DatasetSpec(_Strict):
    source: Literal["medagentsbench", "jsonl", "sample", "freetext", "hf"] = "sample"
    """Where questions come from. `sample` is the built-in set shipped with the package."""
    path: str | None = None
    """A MedAgentsBench folder (`<subset>/test_hard.jsonl`), a clone of its repo, or a JSONL file."""
    subsets: list[str] | None = None
    """Subsets to load; all of them when omitted."""
    limit: int | None = Field(default=None, ge=1, le=10_000_000, strict=True)
    """Questions per subset, sampled deterministically with `seed`. All when omitted (`true` is not 1)."""
    seed: int = Field(default=42, ge=-(2**63), le=2**63 - 1, strict=True)
    """Seed of the per-subset sample."""
    scoring: Literal["exact_set", "any_of"] = "exact_set"
    """How multi-answer items are scored; single-answer items score the same either way."""
    multi_answer: bool | None = None
    """The items' type: `true` select-all, `false` single-best, unset each record's `multi_answer`
    (absent: single-best). Never read from the gold letters, which would tell the agents the answer."""
    split: str = "test"
    """`source: hf`: the split of a saved DatasetDict folder."""
    preset: PresetName | None = None
    """`source: hf`: a field mapping of a known benchmark (`fields` overrides single keys)."""
    fields: dict[str, object] | None = None
    """`source: hf`: the columns of the question's fields (experiments/run/sources/hf_presets.py: HFFields)."""
    parts: list[DatasetPart] | None = None
    """Several named benchmarks in one run, each a dataset block of its own (`dataset_parts.py`)."""


class BudgetMatch(_Strict):
    """Give a sampling baseline, per question, the compute a reference run's condition spent."""

    run: str
    """The reference run directory (relative to the current directory, like `run.runs_dir`)."""
    condition: str
    """The reference condition's slug, e.g. `c1r1`."""
    by: Literal["calls", "tokens"] = "calls"
    """Match model calls, or tokens (prompt + completion), both as requested: cache hits included."""
    allow_other_model: bool = False
    """Budgets measured with another model (backend or name) are refused unless this is true."""


class About(_Strict):
    """`about:`, read only by `medpanel scenarios`: what a shipped scenario reproduces."""

    table: str | None = None
    """The paper table it reproduces, e.g. `seed paper Table 2A`."""
    calls_per_question: str | None = None
    """Measured model calls per question and where the figure comes from."""


class Scenario(_Strict):
    name: str
    """The run's name, a slug: run directories are `runs/<name>-<UTC stamp>/`."""
    description: str = ""
    """One line for the catalogue and the report header; `Deviation: name = value` declares a deviation."""
    about: About | None = None
    """Catalogue facts (`medpanel scenarios`); no effect on the run."""
    pipeline: str = "generalist"
    """A built-in pipeline (`medpanel validate` lists them on a typo), `module:Class`, or a registered name."""
    flags: dict[str, list[int | str]] = Field(default_factory=dict)
    """A grid: every combination of values is one condition, e.g. `{c: [0, 1], r: [0, 1]}`."""
    variants: list[str] = Field(default_factory=list)
    """Extra named conditions appended to the grid (e.g. `c1r1k1-ind`)."""
    settings: dict[str, object] = Field(default_factory=dict)
    """Pipeline settings (rounds, turns, limits ...). The pipeline validates them."""
    compare: list[tuple[str, str]] = Field(default_factory=list)
    """Condition pairs (a, b) for paired statistics; default: every pair differing in one flag."""
    dataset: DatasetSpec = Field(default_factory=DatasetSpec)
    """Which questions the run asks."""
    model: ModelSpec = Field(default_factory=ModelSpec)
    """The backend, endpoint, sampling and cache of every call (or `models:` for several)."""
    run: RunSpec = Field(default_factory=RunSpec)
    """Workers, storage, repeats, budgets and rate limits."""
    budget_match: BudgetMatch | None = None
    """Per-question budgets for a sampling baseline (`sc`), measured from a reference run."""
    models: list[ModelEntry] = Field(default_factory=list)
    """Models as a grid axis: every condition runs on each labelled block (`c1r1@qwen-7b`); see `axes.py`."""
    roles: dict[str, RoleModel] = Field(default_factory=dict)
    """Role -> `{model: LABEL}`: that role's calls go to another model of `models:`."""
    prompts: dict[str, PromptRef] = Field(default_factory=dict)
    """`<role>` or `<role>.<part>` -> a prompt file replacing that role's prompt in every condition."""
    prompt_variants: dict[str, dict[str, PromptRef]] = Field(default_factory=dict)
    """Named sets of prompt overrides, run as a grid axis beside the defaults (`c1r1+terse-challenger`)."""
    references: References | None = None
    """Published per-item runs (`file`, `runs: [{model, method}]`): reported beside the conditions, paired with each."""
    prompts_root: str | None = None
    """A folder prompt files may also come from; else only the scenario's folder and its project."""

    @model_validator(mode="after")
    def _model_of_models(self) -> Scenario:
        # With `models:` the first grid model stands in wherever one model is read (accommodations,
        # the health check, run.json's `model`); `axes.check` refuses a `model:` block beside it.
        grid = [m for m in self.models if m.grid]
        if grid and "model" not in self.model_fields_set:
            self.__dict__["model"] = grid[0].spec()  # not via setattr: that would mark `model` as given
        return self

    @field_validator("name")
    @classmethod
    def _slug_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError("use letters, digits, '-', '_' or '.' (it names the run directory)")
        return v

    @field_validator("flags")
    @classmethod
    def _known_flags(cls, v: dict[str, list[int | str]]) -> dict[str, list[int | str]]:
        size = 1
        for key, values in v.items():
            if not re.fullmatch(r"[a-z][a-z_]*", key):
                raise ValueError(f"flag name {key!r} must be lowercase letters")
            if not values:
                raise ValueError(f"flag {key!r} needs at least one value, e.g. [0, 1]")
            if key != "variant":
                # Every pipeline flag (c, r, k) switches a part off or on, so 2 or -1 would only run
                # a mislabelled copy of the 1 condition (the pipelines test `on()`, not the value).
                bad = [x for x in values if isinstance(x, str) or x not in (0, 1)]
                if bad:
                    raise ValueError(f"flags.{key} takes 0 (off) or 1 (on), got {', '.join(map(repr, bad))}. "
                                     f"Write {key}: [0, 1]")
            size *= len(values)
        if size > MAX_CONDITIONS:
            raise ValueError(f"the flag grid makes {size:,} conditions; a scenario may have at most "
                             f"{MAX_CONDITIONS:,}. Use fewer flags or values")
        return v

    @field_validator("variants")
    @classmethod
    def _few_variants(cls, v: list[str]) -> list[str]:
        if len(v) > MAX_CONDITIONS:
            raise ValueError(f"{len(v):,} variants make too many conditions; a scenario may have at most "
                             f"{MAX_CONDITIONS:,}")
        return v

    @model_validator(mode="after")
    def _few_conditions(self) -> Scenario:
        grid = 1
        for values in self.flags.values():
            grid *= len(values)
        if grid * bool(self.flags) + len(self.variants) > MAX_CONDITIONS:
            raise ValueError(f"flags and variants make more than {MAX_CONDITIONS:,} conditions. Use fewer")
        return self

    def conditions(self) -> list[Condition]:
        """Expand the flag grid (and named variants) into conditions with stable slugs."""
        keys = sorted(self.flags, key=lambda k: (FLAG_ORDER.index(k) if k in FLAG_ORDER else 99, k))
        # No flags: one plain condition, unless named variants define every condition themselves.
        combos = itertools.product(*(self.flags[k] for k in keys)) if keys else ([] if self.variants else [()])
        out: list[Condition] = []
        for combo in combos:
            flags = dict(zip(keys, combo, strict=True))
            out.append(Condition(slug=slug_for(flags) or self.pipeline, pipeline=self.pipeline,
                                 flags=flags, settings=self.settings))
        for variant in self.variants:
            out.append(condition_from_slug(variant, self.pipeline, self.settings))
        out = axes.expand(out, self)
        slugs = [c.slug for c in out]
        dupes = {s for s in slugs if slugs.count(s) > 1}
        if dupes:
            raise ValueError(f"conditions repeat: {', '.join(sorted(dupes))}")
        return out


def _hint(err_type: str, loc: tuple[object, ...]) -> str:
    if err_type == "extra_forbidden":
        parent = loc[:-1]
        model: type[BaseModel] = Scenario
        for part in parent:
            field = model.model_fields.get(str(part))
            ann = field.annotation if field else None
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                model = ann
            else:
                break
        return f"Remove it, or use one of: {', '.join(model.model_fields)}"
    # medpanel's own validators (value_error) already end with the fix
    return {"missing": "Add it", "value_error": ""}.get(err_type, "Fix the value")


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Read and validate a scenario file (plus `--set` overrides); every problem is one `UserError` line."""
    p = Path(path)
    file = str(p)
    data, lines = read_scenario(p, overrides)
    try:
        scenario = Scenario.model_validate(data)
        axes.check(scenario, file)  # before the grid: a duplicate label would read as repeated conditions
        conditions = scenario.conditions()
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = tuple(e["loc"])
        line = lines.get(loc) or lines.get(loc[:-1]) or lines.get(loc[:1])
        where = f" (line {line})" if line else ""
        set_keys = [tuple(o.partition("=")[0].strip().split(".")) for o in overrides or []]
        if any(tuple(str(x) for x in loc[:len(k)]) == k for k in set_keys):
            where = " (from --set)"  # the YAML's line would point at the value --set replaced
        msg = e["msg"].removeprefix("Value error, ")
        hint = _hint(e["type"], loc)
        raise UserError(f"{msg}{where}{'. ' + hint if hint else ''}", file=file,
                        field=".".join(str(x) for x in loc) or "<top>") from None
    except ValueError as exc:
        raise UserError(f"{exc}. Fix `flags`/`variants`", file=file, field="flags") from None
    scenario = axes.resolve_prompts(scenario, base=p.parent, file=file)
    slugs = [c.slug for c in conditions]
    _check_compare(scenario, slugs + [axes.base_slug(s) for s in slugs], file, lines.get(("compare",)))
    check_cost_budget(scenario.run, file=file, field="run.max_cost_usd",
                      priced=any(m.prices is not None for m in scenario.models))
    return scenario


def check_cost_budget(run: RunSpec, *, file: str | None = None, field: str = "run.max_cost_usd",
                      priced: bool = False) -> None:
    """A dollar limit with no prices would count every call as $0 and never halt the run."""
    if run.max_cost_usd is not None and not run.prices and not priced:
        raise UserError(f"a limit of ${run.max_cost_usd} needs run.prices ($ per million tokens by model name, "
                        "e.g. prices: {gpt-4o-mini: {input: 0.15, output: 0.60}}); without them every call costs "
                        "$0 and the limit never triggers", file=file, field=field)


def _check_compare(scenario: Scenario, slugs: list[str], file: str, line: int | None) -> None:
    """A `compare` pair naming no condition of the scenario would be dropped from the report."""
    for i, pair in enumerate(scenario.compare):
        unknown = [x for x in pair if x not in slugs]
        if unknown:
            where = f" (line {line})" if line else ""
            raise UserError(f"pair {list(pair)} names {unknown[0]!r}, which is not a condition of this "
                            f"scenario{where}. Its conditions are: {', '.join(slugs)}", file=file,
                            field=f"compare[{i}]")
        if pair[0] == pair[1]:
            raise UserError(f"pair {list(pair)} compares {pair[0]!r} with itself. Name two conditions", file=file,
                            field=f"compare[{i}]")
