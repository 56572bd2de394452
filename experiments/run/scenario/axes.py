"""Two grid axes besides the flags: backbone models (`models:`) and prompt variants (`prompt_variants:`).

Every condition of the flag grid runs on every model and under every prompt variant. The axes live in
a condition's flags under `model` and `prompts` (so the report's default pairs, which differ in one
flag, compare a condition across models as well as within one) and in its slug:
`c1r1+terse-challenger@qwen-7b`. The pipeline never sees them: it plans the base condition (`c1r1`),
and the run hands each question its model, its routed roles and its prompt overrides.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator
from typing_extensions import Self  # typing.Self is 3.11+; the package supports 3.10 (pydantic installs it)

from medpanel.agents.model.spec import ModelSpec
from medpanel.agents.pipelines import registry
from medpanel.agents.types import Condition, TranscriptEvent
from medpanel.experiments.errors import UserError, read_text
from medpanel.experiments.run.tracking.budget import Budget, Price, RateLimiter
from medpanel.experiments.run.tracking.state import Stop

MODEL_FLAG = "model"
PROMPTS_FLAG = "prompts"
AXIS_FLAGS = (PROMPTS_FLAG, MODEL_FLAG)
_LABEL = r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}"
_VARIANT = r"[a-z0-9][a-z0-9_-]{0,39}"
MAX_PROMPT_BYTES = 200_000

ROUTABLE_ROLES = ("challenger", "generalist", "specialist", "selector", "recruiter", "moderator", "knowledge_gate",
                  "curator", "triage", "direct", "cot", "sc", "candidate", "assessor", "verifier", "followup",
                  "judge", "planner", "responder", "grader")
"""The `role=` names of the agents in `methods/panel/roles/`, `agents/roles/` and `methods/clear/roles/`; `roles:`
routes by them."""


class ModelLimits(BaseModel):
    """One model's own budget (the run's `run.max_*` apply to all models together on top)."""

    model_config = ConfigDict(extra="forbid")

    max_calls: int | None = Field(default=None, ge=1)
    """Requests this model may receive, as `run.max_calls`."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Tokens spent (prompt + completion), as `run.max_tokens`; not the reply cap `max_tokens` of the block."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """Dollars this model may cost, priced with its `prices`."""
    requests_per_minute: float | None = Field(default=None, gt=0)
    """This model's own request rate, shared by every worker of the process."""


class ModelEntry(ModelSpec):
    """One block of `models:`: a `model:` block with a label, and its own prices and budgets."""

    label: str
    """Short name in slugs and tables: `c1r1@qwen-7b`."""
    grid: bool = True
    """false: the model serves routed roles only (`roles:`) and is not a grid axis value."""
    prices: Price | None = None
    """$ per million tokens for this model (merged into `run.prices` by model name)."""
    budget: ModelLimits = Field(default_factory=ModelLimits)
    """This model's own calls, tokens, dollars and rate limit."""

    @field_validator("label")
    @classmethod
    def _label(cls, v: str) -> str:
        if not re.fullmatch(_LABEL, v):
            raise ValueError(f"label {v!r} must be 1-40 letters, digits, '.', '_' or '-' (it goes into slugs "
                             "like c1r1@qwen-7b). Write e.g. label: qwen-7b")
        return v

    def spec(self) -> ModelSpec:
        """The plain model settings (what a single `model:` block would hold)."""
        return ModelSpec.model_validate(self.model_dump(include=set(ModelSpec.model_fields)))


class RoleModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    """The label of a `models:` block: this role's calls go there."""


class PromptFile(BaseModel):
    """A prompt override read at load time: run.json keeps its text and hash, so a resume needs no file."""

    model_config = ConfigDict(extra="forbid")

    file: str
    text: str
    sha256: str


PromptRef = str | PromptFile


class Scenario(Protocol):
    """What this module reads of `experiments.run.scenario.Scenario` (which imports this module)."""

    models: list[ModelEntry]
    roles: dict[str, RoleModel]
    prompts: dict[str, PromptRef]
    prompt_variants: dict[str, dict[str, PromptRef]]
    prompts_root: str | None
    @property
    def model(self) -> ModelSpec: ...

    @property
    def run(self) -> Any: ...

    def model_copy(self, *, update: dict[str, object] | None = None, deep: bool = False) -> Self: ...


# -- conditions -----------------------------------------------------------------------------------


def grid_labels(scenario: Scenario) -> list[str | None]:
    labels: list[str | None] = [m.label for m in scenario.models if m.grid]
    return labels or [None]


def expand(conditions: list[Condition], scenario: Scenario) -> list[Condition]:
    """Every condition under every prompt variant (the defaults first) on every model."""
    variants: list[str | None] = [None, *scenario.prompt_variants]
    labels = grid_labels(scenario)
    if variants == [None] and labels == [None]:
        return conditions
    out = []
    for cond in conditions:
        for variant in variants:
            for label in labels:
                flags = dict(cond.flags)
                slug = cond.slug
                if variant is not None:
                    flags[PROMPTS_FLAG], slug = variant, f"{slug}+{variant}"
                if label is not None:
                    flags[MODEL_FLAG], slug = label, f"{slug}@{label}"
                out.append(cond.model_copy(update={"slug": slug, "flags": flags}))
    return out


def base_slug(slug: str) -> str:
    return re.split(r"[+@]", slug, maxsplit=1)[0]


def split_slug(slug: str) -> tuple[str, str | None, str | None]:
    """`c1r1+terse@qwen` -> ("c1r1", "terse", "qwen")."""
    m = re.fullmatch(r"([^+@]*)(?:\+([^@]+))?(?:@(.+))?", slug)
    assert m is not None
    return m.group(1), m.group(2), m.group(3)


def strip_axes(cond: Condition) -> Condition:
    """The condition the pipeline plans: its flags and slug without the model and prompt axes."""
    if not any(k in cond.flags for k in AXIS_FLAGS):
        return cond
    flags = {k: v for k, v in cond.flags.items() if k not in AXIS_FLAGS}
    return cond.model_copy(update={"slug": base_slug(cond.slug), "flags": flags})


def expand_pairs(pairs: Sequence[tuple[str, str]], conditions: Sequence[str]) -> list[tuple[str, str]]:
    """`compare` pairs of base slugs (`[c0r0, c1r0]`) become the pair within every model and variant."""
    out: list[tuple[str, str]] = []
    for a, b in pairs:
        if a in conditions and b in conditions:
            out.append((a, b))
            continue
        for slug in conditions:
            base, variant, label = split_slug(slug)
            if base == a:
                partner = b + (f"+{variant}" if variant else "") + (f"@{label}" if label else "")
                if partner in conditions:
                    out.append((slug, partner))
    return list(dict.fromkeys(out))


# -- checks at load -------------------------------------------------------------------------------


def check(scenario: Scenario, file: str) -> None:
    """Labels unique, routes naming a label and a role, variant names usable in slugs."""
    grid = [m for m in scenario.models if m.grid]
    if grid and scenario.model != grid[0].spec():  # the validator set it to the first grid model unless given
        raise UserError("has both model: and models:. Keep one: a single model: block, or a list of labelled "
                        "models: blocks", file=file, field="model")
    seen: dict[str, int] = {}
    for i, entry in enumerate(scenario.models):
        if entry.label in seen:
            raise UserError(f"label {entry.label!r} is used by models[{seen[entry.label]}] too. Give every model "
                            "its own label", file=file, field=f"models[{i}].label")
        seen[entry.label] = i
    if scenario.models and not any(m.grid for m in scenario.models):
        raise UserError("every model has grid: false, so no condition would run. Set grid: true on one",
                        file=file, field="models")
    if sum(m.backend == "local" for m in scenario.models) > 1:
        raise UserError("more than one model has backend: local; one embedded model serves a run. Keep one",
                        file=file, field="models")
    for role, route in scenario.roles.items():
        if role not in ROUTABLE_ROLES:
            raise UserError(f"unknown role {role!r}. Roles: {', '.join(ROUTABLE_ROLES)}", file=file,
                            field=f"roles.{role}")
        if route.model not in seen:
            raise UserError(f"names model {route.model!r}, which is no label of models: "
                            f"({', '.join(seen) or 'none defined'}). Add a models: block with label: {route.model}",
                            file=file, field=f"roles.{role}.model")
    for name in scenario.prompt_variants:
        if not re.fullmatch(_VARIANT, name):
            raise UserError(f"variant name {name!r} must be lowercase letters, digits, '-' or '_' (it goes into "
                            "slugs like c1r1+terse-challenger)", file=file, field=f"prompt_variants.{name}")


def prompt_parts() -> dict[str, Traversable]:
    """`<role>.<part>` -> its file, for every prompt file of the roles (`registry.prompt_packages`)."""
    files = [p for pkg in registry.prompt_packages() for p in resources.files(pkg).iterdir() if p.name.endswith(".md")]
    return {p.name.removesuffix(".md"): p for p in sorted(files, key=lambda p: p.name)}


def _fields(text: str) -> set[str]:
    names = set()
    for _, name, _, _ in string.Formatter().parse(text):
        if name is not None:
            names.add(re.split(r"[.\[]", name, maxsplit=1)[0] or "{}")
    return names


def _key(key: str, field_name: str, file: str) -> str:
    parts = prompt_parts()
    full = key if key in parts else f"{key}.system" if f"{key}.system" in parts else None
    if full is None:
        roles = sorted({k.split(".")[0] for k in parts})
        own = [k for k in parts if k.startswith(f"{key}.")]
        fix = f"Its prompts: {', '.join(own)}" if own else f"Roles with prompts: {', '.join(roles)}"
        raise UserError(f"no prompt {key!r} (a role's `system` prompt, or <role>.<part>). {fix}", file=file,
                        field=field_name)
    return full


def prompt_roots(base: Path, prompts_root: str | None) -> list[Path]:
    """Where prompt files may come from: the scenario's folder, its project, and `prompts_root`.

    A prompt file is sent to the endpoint as a system prompt: a scenario from elsewhere must not
    be able to send `/etc/passwd` or `~/.ssh/id_rsa` without saying so."""
    base = base.resolve()
    project = next((d for d in [base, *base.parents] if (d / "pyproject.toml").is_file() or (d / ".git").exists()),
                   base)
    return [base, project, *([(base / prompts_root).resolve()] if prompts_root else [])]


def read_prompt(key: str, ref: PromptRef, *, base: Path, file: str, field_name: str,
                roots: list[Path] | None = None) -> PromptFile:
    """Read an override and check its fields against the template it replaces."""
    full = _key(key, field_name, file)
    if isinstance(ref, PromptFile):
        text, path = ref.text, ref.file
    else:
        p = Path(ref) if Path(ref).is_absolute() else base / ref
        path = str(p)
        allowed = roots if roots is not None else prompt_roots(base, None)
        if not any(p.resolve().is_relative_to(r) for r in allowed):
            raise UserError(f"{p} lies outside the scenario's folder and its project ({allowed[-1]}); a prompt file "
                            "is sent to the endpoint. Move it there, or name its folder in prompts_root:",
                            file=file, field=field_name)
        text = read_text(p, what="prompt file", fix=f"Check {field_name} (relative to the scenario's folder)",
                         max_bytes=MAX_PROMPT_BYTES)
    original = prompt_parts()[full].read_text(encoding="utf-8")
    want = _fields(original)
    try:
        got = _fields(text)
    except ValueError as exc:
        raise UserError(f"{path} is not a valid template ({exc}); write literal braces as {{{{ and }}}}", file=file,
                        field=field_name) from None
    fills = ", ".join(f"{{{f}}}" for f in sorted(want)) or "none"
    unknown, missing = sorted(got - want), sorted(want - got)
    if unknown:
        raise UserError(f"{path} has unknown field {{{unknown[0]}}}; {full}.md fills: {fills}", file=file,
                        field=field_name)
    if missing:
        raise UserError(f"{path} lacks field {{{missing[0]}}}; {full}.md fills: {fills}", file=file,
                        field=field_name)
    return PromptFile(file=path, text=text, sha256=hashlib.sha256(text.encode()).hexdigest())


_S = TypeVar("_S", bound=Scenario)


def resolve_prompts(scenario: _S, *, base: Path, file: str) -> _S:
    """The scenario with every prompt override read, checked, and keyed by `<role>.<part>`."""
    if not scenario.prompts and not scenario.prompt_variants:
        return scenario
    roots = prompt_roots(base, scenario.prompts_root)

    def block(refs: dict[str, PromptRef], where: str) -> dict[str, PromptRef]:
        out: dict[str, PromptRef] = {}
        for key, ref in refs.items():
            resolved = read_prompt(key, ref, base=base, file=file, field_name=f"{where}.{key}", roots=roots)
            out[_key(key, f"{where}.{key}", file)] = resolved
        return out

    return scenario.model_copy(update={
        "prompts": block(scenario.prompts, "prompts"),
        "prompt_variants": {n: block(v, f"prompt_variants.{n}") for n, v in scenario.prompt_variants.items()}})


# -- at run time ----------------------------------------------------------------------------------


def _texts(refs: dict[str, PromptRef]) -> dict[str, str]:
    out = {}
    for key, ref in refs.items():
        if not isinstance(ref, PromptFile):
            raise UserError(f"prompt {key!r} was not read ({ref!r}); load the scenario with load_scenario or "
                            "make_plan", field=f"prompts.{key}")
        out[key] = ref.text
    return out


@dataclass(frozen=True)
class RunAxes:
    """What each condition runs on: its model, its routed roles, its prompt overrides."""

    default: ModelSpec
    models: dict[str, ModelSpec]
    entries: dict[str, ModelEntry]
    cond_model: dict[str, str | None]
    cond_prompts: dict[str, dict[str, str]]
    routes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, scenario: Scenario, conditions: Sequence[Condition], default: ModelSpec) -> RunAxes:
        timeout = scenario.run.per_call_timeout_s
        models = {}
        for m in scenario.models:
            spec = m.spec()
            models[m.label] = spec.model_copy(update={"timeout_s": timeout}) if timeout else spec
        base = _texts(scenario.prompts)
        variants = {n: {**base, **_texts(v)} for n, v in scenario.prompt_variants.items()}
        cond_model = {}
        cond_prompts = {}
        for c in conditions:
            label = c.flags.get(MODEL_FLAG)
            cond_model[c.slug] = str(label) if label is not None else None
            variant = c.flags.get(PROMPTS_FLAG)
            cond_prompts[c.slug] = variants[str(variant)] if variant is not None else base
        return cls(default, models, {m.label: m for m in scenario.models}, cond_model, cond_prompts,
                   {role: r.model for role, r in scenario.roles.items()})

    def model_for(self, slug: str) -> tuple[str | None, ModelSpec]:
        label = self.cond_model.get(slug)
        return (label, self.models[label]) if label is not None else (None, self.default)

    def prices(self) -> dict[str, Price]:
        return {self.models[k].model_name: e.prices for k, e in self.entries.items() if e.prices is not None}

    def budgets(self, stop: Stop, prices: dict[str, Price]) -> dict[str, ModelBudget]:
        out = {}
        for label, e in self.entries.items():
            b = e.budget
            if any(v is not None for v in b.model_dump().values()):
                out[label] = ModelBudget(stop=stop, label=label, max_calls=b.max_calls, max_tokens=b.max_tokens,
                                         max_cost_usd=b.max_cost_usd, prices=prices,
                                         limiter=RateLimiter(b.requests_per_minute) if b.requests_per_minute
                                         else None)
        return out


@dataclass
class ModelBudget(Budget):
    """One model's own limits: its calls alone count, and spending them halts the run (resumably)."""

    label: str = ""

    def on_event(self, event: TranscriptEvent) -> None:
        if event.data.get("model_label") == self.label:
            super().on_event(event)

    def _halt(self, why: str, flag: str) -> None:
        self.stop.set(f"budget of model {self.label}: {why}; raise that model's limit in the scenario "
                      "(run.json's scenario.models) and resume")


def gate(run_gate: Callable[[], Any] | None, budget: ModelBudget | None) -> Callable[[], Any] | None:
    """The run's check before a request, then the model's own (its budget and rate limit)."""
    if budget is None:
        return run_gate

    async def before_call() -> None:
        if run_gate is not None:
            await run_gate()
        await budget.before_call()

    return before_call
