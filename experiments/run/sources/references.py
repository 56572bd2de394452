"""Published runs named as reference conditions: the `references:` block, its file, and the check
that its items are the run's questions.

A reference is a run someone else made and logged per item (MedAgentsBench's authors published
every item of their runs on the 862 hard questions): it is never run here, only read, and paired
against every condition of the run on the questions both have. The file is JSON lines, gzipped or
not, one object per (model, method, dataset, realidx) with `predicted`, `gold`, `correct` and the
logged `prompt_tokens`, `completion_tokens`, `cost_usd`, `time_s`.

Everything is checked when a run is planned, before any model call: the file (missing, not gzip,
not JSON, a malformed or repeated item), the runs it names (an unknown model or method), and the
match of its items with the run's questions, by dataset and realidx and the same gold letter.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from medpanel.agents.types import Question
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.store.jsonline import lines_of
from medpanel.inputs import InputFileError, read_input

MAX_REFERENCE_BYTES = 512_000_000
"""Decompressed bytes a reference file may hold (the published one is about 8 MB): a gzip bomb stops here."""
FIELD = "references"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReferenceRun(_Strict):
    """One published run of the file, by the model and method it logs."""

    model: str
    """The model as the file names it, e.g. `gpt-4o`, `DeepSeek-V3`."""
    method: str
    """The method as the file names it, e.g. `zero_shot`, `cot_sc-5`, `spo`, `aflow`."""
    label: str | None = None
    """The name of its rows in the report; default `<model>/<method> (published)`."""

    @property
    def name(self) -> str:
        return self.label or f"{self.model}/{self.method} (published)"


class References(_Strict):
    """`references:`: published per-item runs, reported beside the run's conditions and paired with each."""

    file: str
    """JSON lines (gzip or plain), one object per (model, method, dataset, realidx); relative to the scenario's
    folder, e.g. `${MEDAGENTSBENCH_DIR:-../../shared/data/medagentsbench}/published_predictions.jsonl.gz`."""
    runs: list[ReferenceRun] = Field(min_length=1, max_length=64)
    """The published runs to report, e.g. `[{model: gpt-4o, method: spo}, {model: gpt-4o, method: aflow}]`."""
    allow_missing: bool = False
    """Pair on the questions both have when a reference lacks some of the run's questions (three published
    runs dropped 1-3 items). Off: every question of the run must be in every reference."""
    sha256: str | None = None
    """The file's SHA-256; set by medpanel when the run is planned (so the report can tell a changed file), or
    written here to pin one version."""

    @field_validator("runs")
    @classmethod
    def _distinct(cls, v: list[ReferenceRun]) -> list[ReferenceRun]:
        names = [r.name for r in v]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"{dupes[0]!r} is named twice. Name each published run once (or give a `label`)")
        return v


class Item(BaseModel):
    """One logged item of a published run (the file's line); nothing is recomputed."""

    model_config = ConfigDict(frozen=True)

    model: str
    method: str
    dataset: str
    realidx: str
    predicted: str | None
    """The letter the run logged; null when its reply had none (scored wrong, counted as invalid)."""
    gold: str
    correct: bool
    prompt_tokens: int | None = Field(default=None, ge=0)
    completion_tokens: int | None = Field(default=None, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)
    """Logged instead of tokens by the runs that report a cost (AFlow, SPO)."""
    time_s: float | None = None

    @field_validator("realidx", mode="before")
    @classmethod
    def _as_str(cls, v: object) -> object:
        # realidx is an int in some datasets and a str in others; questions key it as str.
        return str(v).strip() if isinstance(v, int) and not isinstance(v, bool) else v

    @property
    def key(self) -> tuple[str, str]:
        return (self.dataset, self.realidx)


Runs = dict[tuple[str, str], dict[tuple[str, str], Item]]
"""(model, method) -> (dataset, realidx) -> item."""


@dataclass(frozen=True)
class ReferenceFile:
    path: Path
    sha256: str
    runs: Runs


def _raw(path: Path, field: str) -> tuple[str, bytes]:
    """(SHA-256 of the file as stored, its JSON lines decompressed), bounded against a gzip bomb."""
    fix = "Check references.file (relative paths start at the scenario's folder)"
    try:
        if path.is_dir():
            raise UserError(f"is a folder, not a reference file. {fix}", file=str(path), field=field)
        # Through the one reader of a user's files: a FIFO or a device is refused before a byte is read.
        stored = read_input(path, what="reference file", fix=fix, max_bytes=MAX_REFERENCE_BYTES)
        if stored[:2] == b"\x1f\x8b":
            with gzip.GzipFile(fileobj=io.BytesIO(stored)) as gz:
                data = gz.read(MAX_REFERENCE_BYTES + 1)
        else:
            data = stored
    except InputFileError as exc:
        raise UserError(exc.reason, file=str(path), field=field) from None
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise UserError(f"a damaged gzip file ({exc or 'cut short'}). Download it again, or give it uncompressed",
                        file=str(path), field=field) from None
    except OSError as exc:
        raise UserError(f"cannot read this reference file ({exc.strerror or exc}). {fix}", file=str(path),
                        field=field) from None
    if len(stored) > MAX_REFERENCE_BYTES or len(data) > MAX_REFERENCE_BYTES:
        raise UserError(f"holds more than {MAX_REFERENCE_BYTES:,} bytes. Keep only the runs you reference",
                        file=str(path), field=field)
    return hashlib.sha256(stored).hexdigest(), data


def _parse(data: bytes, file: str, field: str) -> Runs:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserError("neither gzip nor UTF-8 JSON lines. Give the published predictions file "
                        "(one JSON object a line, gzipped or not)", file=file, field=field) from None
    runs: Runs = {}
    for n, line in enumerate(lines_of(text), 1):
        if not line.strip():
            continue
        try:
            item = Item.model_validate_json(line)  # parsed and checked in one pass: half the time of json.loads
        except ValidationError as exc:
            e = exc.errors()[0]
            if e["type"] == "json_invalid":
                raise UserError(f"line {n} is not JSON ({e['msg'].removeprefix('Invalid JSON: ')}). Each line must "
                                "be one JSON object", file=file, field=field) from None
            where = ".".join(str(x) for x in e["loc"]) or "the line"
            raise UserError(f"line {n}: {where}: {e['msg']}. Each line needs model, method, dataset, realidx, "
                            "predicted, gold and correct", file=file, field=field) from None
        items = runs.setdefault((item.model, item.method), {})
        if item.key in items:
            raise UserError(f"line {n} repeats {item.model}/{item.method} {item.dataset} {item.realidx}. Keep one "
                            "line per (model, method, dataset, realidx)", file=file, field=field)
        items[item.key] = item
    if not runs:
        raise UserError("holds no items. Give the published predictions file", file=file, field=field)
    return runs


@lru_cache(maxsize=4)
def _read_cached(path: Path, mtime_ns: int, size: int, field: str) -> ReferenceFile:
    digest, data = _raw(path, field)
    return ReferenceFile(path, digest, _parse(data, str(path), field))


def read_file(path: str | Path, *, field: str = f"{FIELD}.file") -> ReferenceFile:
    """Every item of a reference file, or one `UserError` naming the file and what is wrong."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise UserError("no such reference file. Check references.file (relative paths start at the "
                        "scenario's folder)", file=str(p), field=field) from None
    except OSError as exc:
        raise UserError(f"cannot read this reference file ({exc.strerror or exc})", file=str(p), field=field) from None
    return _read_cached(p.resolve(), st.st_mtime_ns, st.st_size, field)


def select(spec: References, ref: ReferenceFile) -> dict[str, dict[tuple[str, str], Item]]:
    """Reference name -> its items; an unknown model or method is one `UserError` naming what the file holds."""
    out = {}
    for i, run in enumerate(spec.runs):
        items = ref.runs.get((run.model, run.method))
        if items is None:
            models = sorted({m for m, _ in ref.runs})
            if run.model not in models:
                hint = f"the file's models are {', '.join(models)}"
            else:
                hint = f"{run.model}'s methods are {', '.join(sorted(x for m, x in ref.runs if m == run.model))}"
            raise UserError(f"{run.model}/{run.method} is not a run of {ref.path.name}: {hint}", file=str(ref.path),
                            field=f"{FIELD}.runs[{i}]")
        out[run.name] = items
    return out


def matched(items: dict[tuple[str, str], Item], questions: Sequence[Question]) -> tuple[int, int]:
    """(questions the reference holds with the same gold letter, questions it holds with another gold)."""
    same = other = 0
    for q in questions:
        item = items.get((q.dataset, q.qid))
        if item is not None:
            if q.gold == (item.gold,):
                same += 1
            else:
                other += 1
    return same, other


def resolve(spec: References, questions: Sequence[Question], *, base_dir: Path | None, file: str,
            slugs: Sequence[str] = ()) -> References:
    """Check a `references:` block against the run's questions (before any model call) and return it
    with the file's absolute path and SHA-256, which run.json records."""
    for i, run in enumerate(spec.runs):
        if run.name in slugs:  # its rows would merge with the condition's in every table
            raise UserError(f"{run.name!r} is also a condition of this scenario. Give the reference another label",
                            file=file, field=f"{FIELD}.runs[{i}].label")
    path = Path(spec.file).expanduser()
    if not path.is_absolute():
        path = (base_dir if base_dir is not None else Path.cwd()) / path
    ref = read_file(path)
    if spec.sha256 is not None and spec.sha256 != ref.sha256:
        raise UserError(f"{path} has SHA-256 {ref.sha256}, not the {spec.sha256} the scenario pins. Restore that "
                        "file, or update references.sha256", file=file, field=f"{FIELD}.sha256")
    for i, (name, items) in enumerate(select(spec, ref).items()):
        same, other = matched(items, questions)
        if same == len(questions) or (spec.allow_missing and same):
            continue
        gold = f" ({other} more share dataset and realidx but not the gold letter)" if other else ""
        fix = "Use the reference's questions (dataset: source medagentsbench, its nine subsets), or name another run"
        if same and not spec.allow_missing:
            fix += ", or set references.allow_missing: true to pair on the questions both have"
        raise UserError(f"{name} holds {same} of this run's {len(questions)} questions by dataset and realidx{gold}. "
                        f"{fix}", file=file, field=f"{FIELD}.runs[{i}]")
    return spec.model_copy(update={"file": str(path.resolve()), "sha256": ref.sha256})
