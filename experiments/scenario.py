"""Scenario files: YAML -> a validated `Scenario` -> the grid of `Condition`s it describes.

Validation is strict (`extra="forbid"` everywhere) because a misspelt key in a paid benchmark run
is worse than a refusal: every error names the file, the key path, the YAML line and the fix.
"""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from medpanel.agents.backends import ModelSpec
from medpanel.agents.types import Condition
from medpanel.experiments.budget import Price
from medpanel.experiments.errors import UserError

# Flag order in slugs is fixed so `c1r0k1` means the same thing in every scenario and table.
FLAG_ORDER = ("c", "r", "k")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DatasetSpec(_Strict):
    source: Literal["medagentsbench", "jsonl", "sample", "freetext"] = "sample"
    """Where questions come from. `sample` is the built-in set shipped with the package."""
    path: str | None = None
    """A MedAgentsBench folder (`<subset>/test_hard.jsonl`), a clone of its repo, or a JSONL file."""
    subsets: list[str] | None = None
    """Subsets to load; all of them when omitted."""
    limit: int | None = Field(default=None, ge=1)
    """Questions per subset, sampled deterministically with `seed`. All when omitted."""
    seed: int = 42
    """Seed of the per-subset sample."""
    scoring: Literal["exact_set", "any_of"] = "exact_set"
    """How multi-answer items are scored; single-answer items score the same either way."""


class RunSpec(_Strict):
    workers: int = Field(default=4, ge=1, le=256)
    """Questions worked on in parallel (Optuna `n_jobs` threads)."""
    storage: str | None = None
    """SQLAlchemy URL of the study; default `sqlite:///<run_dir>/study.db`."""
    max_errors: int | None = Field(default=10, ge=0)
    """Stop the run (resumably) when more questions than this have error rows, counted over every
    session of the run. `null` means no limit."""
    repeats: int = Field(default=1, ge=1)
    """Run every condition this many times with different seeds (reported as mean ± sd)."""
    shard_size: int | None = Field(default=None, ge=1)
    """(condition, question) pairs per Optuna trial. Chosen from the grid size when omitted."""
    runs_dir: str = "runs"
    """Where run directories are created, relative to the current directory."""
    claim_timeout_s: float = Field(default=3600.0, gt=0)
    """Shared storage: a pair claimed this long ago by a worker that never finished it may be taken
    over by another worker (its machine died)."""
    max_calls: int | None = Field(default=None, ge=1)
    """Halt (resumably) once this many requests have reached the model, over all sessions of the run."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Halt once this many tokens (prompt + completion) have been spent."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """Halt once the spend, priced with `prices`, reaches this many dollars."""
    max_wall_s: float | None = Field(default=None, gt=0)
    """Halt this session after this many seconds."""
    per_call_timeout_s: float | None = Field(default=None, gt=0)
    """Overrides `model.timeout_s`: a call slower than this is retried, then recorded as an error."""
    interrupt_grace_s: float = Field(default=60.0, ge=0)
    """After the first Ctrl-C (or SIGTERM), questions in progress get this long to finish and be
    saved; then they stop at their next model call, unrecorded, and a resume redoes them."""
    requests_per_minute: float | None = Field(default=None, gt=0)
    """A request rate shared by all workers of this process."""
    prices: dict[str, Price] = Field(default_factory=dict)
    """Model name -> `{input: $, output: $}` per million tokens, for `max_cost_usd` and the report."""


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


class Scenario(_Strict):
    name: str
    description: str = ""
    pipeline: str = "generalist"
    flags: dict[str, list[int | str]] = Field(default_factory=dict)
    """A grid: every combination of values is one condition, e.g. `{c: [0, 1], r: [0, 1]}`."""
    variants: list[str] = Field(default_factory=list)
    """Extra named conditions appended to the grid (e.g. `c1r1k1-ind`)."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """Pipeline settings (rounds, turns, limits ...). The pipeline validates them."""
    compare: list[tuple[str, str]] = Field(default_factory=list)
    """Condition pairs (a, b) for paired statistics; default: every pair differing in one flag."""
    dataset: DatasetSpec = Field(default_factory=DatasetSpec)
    model: ModelSpec = Field(default_factory=ModelSpec)
    run: RunSpec = Field(default_factory=RunSpec)
    budget_match: BudgetMatch | None = None
    """Per-question budgets for a sampling baseline (`sc`), measured from a reference run."""

    @field_validator("name")
    @classmethod
    def _slug_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError("use letters, digits, '-', '_' or '.' (it names the run directory)")
        return v

    @field_validator("flags")
    @classmethod
    def _known_flags(cls, v: dict[str, list[int | str]]) -> dict[str, list[int | str]]:
        for key, values in v.items():
            if not re.fullmatch(r"[a-z][a-z_]*", key):
                raise ValueError(f"flag name {key!r} must be lowercase letters")
            if not values:
                raise ValueError(f"flag {key!r} needs at least one value, e.g. [0, 1]")
        return v

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
        slugs = [c.slug for c in out]
        dupes = {s for s in slugs if slugs.count(s) > 1}
        if dupes:
            raise ValueError(f"conditions repeat: {', '.join(sorted(dupes))}")
        return out


def slug_for(flags: dict[str, int | str], variant: str | None = None) -> str:
    """`{c: 1, r: 0}` -> `c1r0`; string-valued flags and a variant append as `-value`."""
    head = "".join(f"{k}{v}" for k, v in flags.items() if isinstance(v, int))
    tail = [str(v) for v in flags.values() if not isinstance(v, int)]
    if variant:
        tail.append(variant)
    return "-".join([head, *tail]) if head else "-".join(tail)


def condition_from_slug(slug: str, pipeline: str, settings: dict[str, Any]) -> Condition:
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


_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _interpolate(text: str, file: str) -> str:
    """Replace `${VAR}` / `${VAR:-default}` before parsing, naming the line of a missing variable."""

    def sub(m: re.Match[str]) -> str:
        value = os.environ.get(m.group(1), m.group(2))
        if value is None:
            line = text.count("\n", 0, m.start()) + 1
            raise UserError(
                f"line {line}: environment variable {m.group(1)} is not set. "
                f"Export it, or write ${{{m.group(1)}:-default}}",
                file=file,
            )
        return value

    return _ENV.sub(sub, text)


class _LineLoader(yaml.SafeLoader):
    """A SafeLoader that remembers the line of every mapping key, for error messages."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping = loader.construct_mapping(node, deep=True)
    lines = {loader.construct_object(k): k.start_mark.line + 1 for k, _ in node.value}
    mapping["__lines__"] = lines  # stripped before validation, kept for error messages
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _strip_lines(obj: Any, lines: dict[tuple[Any, ...], int], path: tuple[Any, ...] = ()) -> Any:
    if isinstance(obj, dict):
        for key, line in obj.pop("__lines__", {}).items():
            lines[(*path, key)] = line
        return {k: _strip_lines(v, lines, (*path, k)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_strip_lines(v, lines, (*path, i)) for i, v in enumerate(obj)]
    return obj


def _hint(err_type: str, loc: tuple[Any, ...]) -> str:
    if err_type == "extra_forbidden":
        parent = loc[:-1]
        model: type[BaseModel] = Scenario
        for part in parent:
            field = model.model_fields.get(str(part))
            ann = getattr(field, "annotation", None) if field else None
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                model = ann
            else:
                break
        return f"Remove it, or use one of: {', '.join(model.model_fields)}"
    if err_type == "missing":
        return "Add it"
    return "Fix the value"


def apply_overrides(data: dict[str, Any], overrides: list[str], file: str) -> None:
    """`--set settings.rounds=1 model.max_tokens=128`: dotted keys, values parsed as YAML."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--set {item!r} is not KEY=VALUE. Example: --set settings.rounds=1", file=file,
                            field="--set")
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise UserError(f"--set {key}: {part} is not a mapping", file=file, field="--set")
            node = child
        node[parts[-1]] = yaml.safe_load(value)


def load_scenario(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Read and validate a scenario file (plus `--set` overrides); every problem is one `UserError` line."""
    p = Path(path)
    file = str(p)
    if not p.is_file():
        raise UserError("file not found. Check the path (scenarios live in scenarios/)", file=file)
    text = _interpolate(p.read_text(encoding="utf-8"), file)
    try:
        raw = yaml.load(text, Loader=_LineLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise UserError(f"{where}malformed YAML ({problem}). Fix the syntax there", file=file) from None
    if not isinstance(raw, dict):
        raise UserError("the top level must be a mapping with at least `name:`", file=file)
    lines: dict[tuple[Any, ...], int] = {}
    data = _strip_lines(raw, lines)
    apply_overrides(data, overrides or [], file)
    try:
        scenario = Scenario.model_validate(data)
        scenario.conditions()
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = tuple(e["loc"])
        line = lines.get(loc) or lines.get(loc[:-1]) or lines.get(loc[:1])
        where = f" (line {line})" if line else ""
        msg = e["msg"].removeprefix("Value error, ")
        raise UserError(f"{msg}{where}. {_hint(e['type'], loc)}", file=file,
                        field=".".join(str(x) for x in loc) or "<top>") from None
    except ValueError as exc:
        raise UserError(f"{exc}. Fix `flags`/`variants`", file=file, field="flags") from None
    return scenario
