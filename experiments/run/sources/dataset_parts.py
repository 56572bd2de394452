"""Several benchmarks in one run: `dataset.parts`, each a named dataset block of its own.

CLEAR is evaluated on ten benchmarks published in as many layouts; one run over all of them keeps
one plan, one store and one report. Each part is loaded as a scenario's `dataset:` block would be,
and its questions' datasets are prefixed with the part's name so tables can tell the benchmarks
apart (`nejm-qa.internal_medicine`, `mmlu.anatomy`; `medqa` stays `medqa`). `limit`, `seed` and
`scoring` stay run-wide: `--limit` caps every part.

A free-text part (`source: freetext`: HealthBench Hard, MedRBench) sits beside the multiple-choice
ones. Its questions keep the dataset names their files give them (`healthbench`,
`medrbench-diagnosis`, `medrbench-treatment`): those name the benchmark and its stage already, and
they are the keys the grader finds each task's rubric or reference under. Its file is also its
grading key: `grading_files` hands the free-text parts' paths to the run's grader
(`settings.rubric_file`, `experiments/run/scenario/plan.py`), so each part is graded by its own files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from medpanel.agents.types import Question
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.sources.datasets import load_dataset
from medpanel.experiments.run.sources.freetext import resolve_path

PresetName = Literal["medqa", "medmcqa", "pubmedqa", "mmlu", "mmlu-pro", "nejm-qa", "medbullets", "medexqa",
                     "afrimedqa"]
"""The presets of `dataset.preset` (experiments/run/sources/hf_presets.py)."""

_OWN = ("source", "path", "subsets", "preset", "fields", "multi_answer", "split")
"""Keys that belong to each part once `parts` is given."""


class DatasetPart(BaseModel):
    """One benchmark of a run over several: a dataset block of its own, named."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    """The benchmark's name in tables; it prefixes each question's dataset (`nejm-qa.internal_medicine`)
    unless the dataset is the name itself."""
    source: Literal["medagentsbench", "jsonl", "sample", "freetext", "hf"] = "hf"
    """Where this benchmark's questions come from, as `dataset.source` (default `hf`: a local file);
    `freetext`: HealthBench's JSONL or MedRBench's JSON files, graded by the pipeline's grader."""
    path: str | None = None
    """Its file or folder, relative to the scenario's folder (a preset's missing file names its publisher)."""
    subsets: list[str] | None = None
    """Its subsets to load (NEJM-QA's specialties, MMLU's subjects); a preset's default when omitted."""
    limit: int | None = Field(default=None, ge=1, le=10_000_000, strict=True)
    """Questions per subset; the run's `dataset.limit` (or `--limit`) caps it when smaller."""
    multi_answer: bool | None = None
    """Declares its items' type, as `dataset.multi_answer` (a preset may declare it: NEJM-QA)."""
    split: str = "test"
    """The split of a saved DatasetDict folder, or the suffix dropped from per-subset file names."""
    preset: PresetName | None = None
    """A field mapping of a known benchmark, as `dataset.preset`."""
    fields: dict[str, object] | None = None
    """The columns of the question's fields, as `dataset.fields` (overrides single keys of the preset)."""


def check_parts(spec: Any, file: str) -> None:
    """Parts alone: a top-level source, path ... beside them would be silently unused."""
    # Compared with the defaults, not `model_fields_set`: a CLI override re-validates a full dump.
    given = [k for k in _OWN if getattr(spec, k) != type(spec).model_fields[k].default]
    if given:
        raise UserError(f"{', '.join(given)} belong to each part when dataset.parts is given: move them into the "
                        "parts", file=file, field="dataset.parts")
    names = [p.name for p in spec.parts]
    if not names or len(set(names)) != len(names):
        raise UserError("dataset.parts needs at least one part and a distinct name for each", file=file,
                        field="dataset.parts")


def grading_files(parts: list[DatasetPart], base_dir: Path | None) -> list[str]:
    """The free-text parts' files, resolved as the loader resolves them: the grader's keys. Absolute,
    since run.json records them and a resume may start from another folder."""
    return [str(resolve_path(p.path, base_dir).absolute()) for p in parts if p.source == "freetext"]


def load_parts(parts: list[DatasetPart], limit: int | None, seed: int, *, base_dir: Path | None) -> list[Question]:
    """The questions of several named benchmarks (`dataset.parts`), in part order.

    Each part is loaded as a dataset block of its own; the run's `limit` caps a part's when smaller.
    A question's dataset becomes `<part>.<dataset>` (`nejm-qa.internal_medicine`, `mmlu.anatomy`),
    or the part's name where the two are one (`medqa`), so tables can tell each benchmark's rows.
    A free-text part's questions keep their own dataset names (the grader's keys, Table 3's columns)."""
    out: list[Question] = []
    owner: dict[str, str] = {}
    for part in parts:
        caps = [n for n in (part.limit, limit) if n is not None]
        try:
            questions = load_dataset(part.source, part.path, part.subsets, min(caps) if caps else None, seed,
                                     base_dir=base_dir, multi_answer=part.multi_answer, split=part.split,
                                     fields=part.fields, preset=part.preset)
        except UserError as exc:  # the same line, its field named inside the part that holds it
            message = str(exc).removeprefix(f"{exc.file}: " if exc.file else "").removeprefix(
                f"{exc.field}: " if exc.field else "")
            field = (exc.field or "dataset").replace("dataset", f"dataset.parts[{part.name}]", 1)
            raise UserError(message, file=exc.file, field=field) from None
        if part.source != "freetext":
            questions = [q.model_copy(update={"dataset": part.name if q.dataset == part.name else
                                              f"{part.name}.{q.dataset}"}) for q in questions]
        for q in questions:
            # Two parts holding one task would make one pair of the run twice (a free-text file
            # named by two parts, or a free-text dataset named like an MCQ part's).
            if owner.setdefault(q.key, part.name) != part.name:
                raise UserError(f"question {q.qid!r} of dataset {q.dataset!r} is in parts {owner[q.key]} and "
                                f"{part.name}. Name each benchmark's file in one part only",
                                field=f"dataset.parts[{part.name}]")
        out.extend(questions)
    return out
