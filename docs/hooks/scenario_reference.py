"""mkdocs hook: the scenario reference, generated from the code at every docs build.

`docs/scenario-reference.md` holds a marker; this hook replaces it with one table per block of a
scenario file (`Scenario` and the models it nests: `dataset:`, `model:`, `run:` ...) and one per
pipeline's `settings:` model. Each row is a field: its key, its type and bounds and its default
(read from the pydantic model) and its description (the field's docstring, read from the source
by griffe, the library mkdocstrings uses). A field added, renamed or re-documented in the code
changes the page at the next build, so the reference cannot drift from what `medpanel validate`
accepts. `tests/test_docs.py` checks the generated page against the models.
"""

from __future__ import annotations

import enum
import functools
import inspect
import sys
import types
import typing
from pathlib import Path
from typing import Any

import annotated_types
import griffe
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

MARKER = "<!-- scenario-reference -->"

# The blocks of a scenario file, in the page's order: (heading, anchor, model's import path).
BLOCKS: list[tuple[str, str, str]] = [
    ("Top level", "top-level", "medpanel.experiments.run.scenario.scenario:Scenario"),
    ("`dataset:`", "dataset", "medpanel.experiments.run.scenario.scenario:DatasetSpec"),
    ("`dataset.parts[]:`", "dataset-parts", "medpanel.experiments.run.sources.dataset_parts:DatasetPart"),
    ("`model:`", "model", "medpanel.agents.model.spec:ModelSpec"),
    ("`model.batch:`", "batch", "medpanel.agents.model.spec:BatchSpec"),
    ("`run:`", "run", "medpanel.experiments.run.scenario.runspec:RunSpec"),
    ("`run.prices.<model name>:`", "prices", "medpanel.experiments.run.tracking.prices:Price"),
    ("`budget_match:`", "budget_match", "medpanel.experiments.run.scenario.scenario:BudgetMatch"),
    ("`about:`", "about", "medpanel.experiments.run.scenario.scenario:About"),
    ("`references:`", "references", "medpanel.experiments.run.sources.references:References"),
    ("`references.runs[]:`", "references-runs", "medpanel.experiments.run.sources.references:ReferenceRun"),
    ("`models:` (each block)", "models", "medpanel.experiments.run.scenario.axes:ModelEntry"),
    ("`models[].budget:`", "models-budget", "medpanel.experiments.run.scenario.axes:ModelLimits"),
    ("`roles.<role>:`", "roles", "medpanel.experiments.run.scenario.axes:RoleModel"),
]


def _import(path: str) -> type[BaseModel]:
    module, _, name = path.partition(":")
    cls = getattr(__import__(module, fromlist=[name]), name)
    assert isinstance(cls, type) and issubclass(cls, BaseModel), path
    return cls


@functools.cache
def _module(name: str) -> griffe.Module:
    # One file, statically: griffe.load would read the whole package (every module) for each.
    path = Path(inspect.getfile(sys.modules[name]))
    return griffe.visit(name, filepath=path, code=path.read_text(encoding="utf-8"))


def field_doc(model: type[BaseModel], field: str) -> str:
    """The docstring under `field` in the first class of `model`'s MRO that declares it."""
    for cls in model.__mro__:
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or field not in inspect.get_annotations(cls):
            continue
        member = _module(cls.__module__)[cls.__qualname__].members.get(field)
        doc = member.docstring if member is not None else None
        return " ".join(doc.value.split()) if doc is not None else ""
    return ""


def _anchors() -> dict[type, str]:
    """Each block's model -> its section, so a nested block's type links to its table."""
    out: dict[type, str] = {_import(path): anchor for _, anchor, path in BLOCKS}
    out.update({model: model.__name__.lower() for model in pipeline_settings()})
    return out


def _type_name(tp: Any, links: dict[type, str]) -> str:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is type(None):
        return "null"
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        # A prompt override is written as a path; PromptFile is what loading makes of it.
        return " or ".join(_type_name(a, links) for a in args if getattr(a, "__name__", "") != "PromptFile")
    if origin in (list, tuple):
        inner = ", ".join(_type_name(a, links) for a in args if a is not Ellipsis)
        return f"list of {inner}" if origin is list else f"pair ({inner})"
    if origin is dict:
        return f"mapping {_type_name(args[0], links)} → {_type_name(args[1], links)}"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"[{tp.__name__}](#{links[tp]})" if tp in links else tp.__name__
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in tp)
    if tp is typing.Any:
        return "any"
    return getattr(tp, "__name__", str(tp)).replace("typing.", "")


def _bounds(info: FieldInfo) -> str:
    out = []
    for meta in info.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(meta, attr, None)
            if isinstance(meta, annotated_types.BaseMetadata) and value is not None:
                out.append(f"{sign} {value}")
    return f" ({', '.join(out)})" if out else ""


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "(its defaults)"
        return f"`{value!r}`" if value else ("`[]`" if isinstance(value, list) else "`{}`")
    if info.default == "":
        return '`""`'
    if info.default is PydanticUndefined:
        return "**required**"
    if info.default is None:
        return "`null`"
    if isinstance(info.default, bool):
        return f"`{str(info.default).lower()}`"
    return f"`{info.default}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def model_table(model: type[BaseModel], links: dict[type, str], *, skip: tuple[str, ...] = ()) -> str:
    rows = ["| key | type | default | what it does |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        rows.append(f"| `{name}` | {_type_name(info.annotation, links)}{_bounds(info)} | {_default(info)} | "
                    f"{_cell(field_doc(model, name))} |")
    return "\n".join(rows)


def pipeline_settings() -> dict[type[BaseModel], list[str]]:
    """Each built-in pipeline's settings model and the `pipeline:` names that use it."""
    from medpanel.agents.pipelines.registry import built_in, get_pipeline

    out: dict[type[BaseModel], list[str]] = {}
    for name in built_in():
        out.setdefault(get_pipeline(name).settings_model, []).append(name)
    return out


def generate() -> str:
    parts: list[str] = []
    links = _anchors()
    for heading, anchor, path in BLOCKS:
        model = _import(path)
        skip = tuple(_import("medpanel.agents.model.spec:ModelSpec").model_fields) if anchor == "models" else ()
        intro = (" Every key of [`model:`](#model) too (endpoint, key variable, sampling, cache ...), plus:"
                 if skip else "")
        doc = " ".join((model.__doc__ or "").split()) if model.__doc__ and anchor != "top-level" else ""
        lead = f"{doc}{intro}".strip()
        parts.append(f"## {heading} {{#{anchor}}}\n\n" + (f"{lead}\n\n" if lead else "")
                     + f"{model_table(model, links, skip=skip)}\n")
    parts.append("## Pipeline settings\n\nThe `settings:` block is validated by the pipeline the scenario "
                 "names; unknown keys are refused. One table per settings model, with the `pipeline:` "
                 "names that read it.\n")
    for model, names in pipeline_settings().items():
        used = ", ".join(f"`{n}`" for n in names)
        parts.append(f"### {model.__name__} {{#{model.__name__.lower()}}}\n\n`pipeline:` {used}\n\n"
                     f"{model_table(model, links)}\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, generate())
