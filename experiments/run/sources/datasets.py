"""Benchmark loaders: JSONL records in the MedAgentsBench format -> `Question`s.

The loader is the one place that sees the raw records, so it is also the place that drops every
field that gives the answer away (`answer`, `answer_rationale`, `reason`, metadata): only the
stem, the options, the gold letters and the id survive into a `Question`.

Whether an item is multi-answer (prompted "Select ALL correct options", answered with a set) is the
data's declared type: the record's `multi_answer` field or the dataset setting, never the number of
gold letters, which would tell the agents something about the answer.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

from medpanel.agents.types import Question
from medpanel.experiments.errors import UserError, not_regular, read_text, special_kind
from medpanel.experiments.run.sources.freetext import load_freetext
from medpanel.experiments.run.sources.hf_datasets import load_hf
from medpanel.experiments.run.sources.hf_presets import PRESETS, default_subsets
from medpanel.experiments.run.store.jsonline import MAX_ID_CHARS, lines_of, load_line, storable

log = logging.getLogger("medpanel.datasets")

SOURCES = ("medagentsbench", "jsonl", "sample", "freetext", "hf")
"""Valid values of `load_dataset(source=...)`."""

HARD_FILE = "test_hard.jsonl"
SAMPLE_RESOURCE = ("data", "sample_questions.jsonl")

_LETTER = re.compile(r"[A-Z]")
_REQUIRED = ("question", "options", "answer_idx", "realidx")


def load_medagentsbench_file(path: Path, dataset: str) -> list[Question]:
    """Load one MedAgentsBench-format JSONL file; every question gets `dataset` as its dataset."""
    return _load_jsonl(Path(path), default_dataset=dataset, use_dataset_field=False)


def _check_request(source: str, limit: int | None, subsets: list[str] | None) -> None:
    """A known source, a positive limit and a non-empty subset list, or a UserError naming the field."""
    if source not in SOURCES:
        raise UserError(
            f"unknown source {source!r}. Use one of: {', '.join(SOURCES)}", field="dataset.source"
        )
    if limit is not None and (isinstance(limit, bool) or limit < 1):
        raise UserError(
            f"limit must be a positive integer, got {limit!r}. Set a number >= 1 or leave it out "
            "to load every question",
            field="dataset.limit",
        )
    if subsets is not None and not subsets:
        raise UserError(
            "subsets is an empty list. Name at least one subset or leave subsets out to load all",
            field="dataset.subsets",
        )


def load_dataset(
    source: str,
    path: str | Path | None,
    subsets: list[str] | None,
    limit: int | None,
    seed: int,
    *,
    base_dir: Path | None = None,
    multi_answer: bool | None = None,
    split: str = "test",
    fields: dict[str, object] | None = None,
    preset: str | None = None,
) -> list[Question]:
    """Load questions for a run, in subset order then file order.

    `limit` applies per subset (a seeded sample, kept in file order); `subsets` None means all.
    A relative `path` is resolved against `base_dir` (the scenario file's folder), else the CWD.
    `multi_answer` declares every item's type (the scenario's `dataset.multi_answer`); None reads
    each record's own `multi_answer` field (default false: single best answer).
    """
    _check_request(source, limit, subsets)
    if source == "freetext":
        # Free-text tasks with rubric items (CLEAR's adapter); they live in their own loader.
        return load_freetext(path, subsets, limit, seed, base_dir=base_dir)
    if source == "hf":
        groups = _group_by_dataset(_load_hf_source(path, split, fields, preset, base_dir))
        if subsets is None:  # a preset's own selection (MMLU: its medical subjects)
            subsets = default_subsets(preset, [g for g, _ in groups], where=str(path))
        groups = _select(groups, subsets, where=str(path))
    elif source == "sample" or path is None:
        if source == "sample" and path is not None:
            raise UserError(
                f"source 'sample' is the built-in set and takes no path (got {str(path)!r}). Drop "
                "path, or use source 'jsonl' for your own file",
                field="dataset.path",
            )
        groups = _group_by_dataset(_load_sample())
        groups = _select(groups, subsets, where="the built-in sample set")
    elif source == "jsonl":
        file = _resolve(path, base_dir)
        if file.is_dir():
            raise UserError(
                "is a folder. Point path at one JSONL file, or use source 'medagentsbench' for a folder of "
                f"<subset>/{HARD_FILE}",
                file=str(file),
                field="dataset.path",
            )
        if special_kind(file):
            raise not_regular(file, what="dataset file", field="dataset.path")
        if not file.is_file():
            raise UserError(
                "no such file. Point path at a JSONL file (relative paths are resolved against the "
                "scenario's folder)",
                file=str(file),
                field="dataset.path",
            )
        groups = _group_by_dataset(_load_jsonl(file, default_dataset=file.stem, use_dataset_field=True))
        groups = _select(groups, subsets, where=str(file))
    else:
        groups = _load_benchmark_dir(_resolve(path, base_dir), subsets)

    out: list[Question] = []
    for _subset, questions in groups:
        out.extend(_sample(questions, limit, seed))
    if multi_answer is not None:
        out = [q.model_copy(update={"multi_answer": multi_answer}) for q in out]
    undeclared = sum(1 for q in out if len(q.gold) > 1 and not q.multi_answer)
    if undeclared:
        # Prompted as single-best: under exact_set they cannot be answered right, under any_of a gold
        # letter counts. Said once, so a dataset that lacks its declaration is noticed.
        log.warning("%d item(s) have several gold letters but are not declared multi-answer; they are asked "
                    "for the single best option (declare multi_answer: true on the record or in dataset)",
                    undeclared)
    return out


# -- sources -------------------------------------------------------------------------------------


def _load_hf_source(path: str | Path | None, split: str, fields: dict[str, object] | None, preset: str | None,
                    base_dir: Path | None) -> list[Question]:
    if path is None:
        raise UserError("source 'hf' needs path: a save_to_disk folder, a parquet or a JSONL file",
                        field="dataset.path")
    if preset is not None and preset not in PRESETS:
        raise UserError(f"unknown preset {preset!r}. Use one of: {', '.join(PRESETS)}", field="dataset.preset")
    name = preset or Path(str(path)).stem
    return load_hf(str(path), split, preset, fields, name=name, base_dir=base_dir)


def _load_sample() -> list[Question]:
    resource = resources.files("medpanel.experiments").joinpath(*SAMPLE_RESOURCE)
    # as_file gives a real path even if the package is ever shipped zipped.
    with resources.as_file(resource) as file:
        return _load_jsonl(Path(file), default_dataset="sample", use_dataset_field=True)


def _load_benchmark_dir(path: Path, subsets: list[str] | None) -> list[tuple[str, list[Question]]]:
    if not path.is_dir():
        hint = " It is a file: use source 'jsonl' for a single file" if path.is_file() else ""
        raise UserError(
            "no such directory. Point path at the MedAgentsBench data folder (one <subset>/"
            f"{HARD_FILE} per subset, or a clone of the repository with data/<subset>/{HARD_FILE})." + hint,
            file=str(path),
            field="dataset.path",
        )
    # A clone of gersteinlab/medagents-benchmark keeps the subsets one level down, under data/.
    root = path / "data" if _subsets_in(path / "data") else path
    available = _subsets_in(root)
    if not available:
        raise UserError(
            f"no <subset>/{HARD_FILE} found here. Point path at the MedAgentsBench data folder",
            file=str(path),
            field="dataset.path",
        )
    wanted = available if subsets is None else list(dict.fromkeys(subsets))
    missing = [s for s in wanted if s not in available]
    if missing:
        raise UserError(
            f"unknown subset(s) {', '.join(missing)}. Available subsets: {', '.join(available)}",
            file=str(root),
            field="dataset.subsets",
        )
    return [(s, load_medagentsbench_file(root / s / HARD_FILE, s)) for s in wanted]


def _subsets_in(root: Path) -> list[str]:
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if (d / HARD_FILE).is_file())


def _resolve(path: str | Path | None, base_dir: Path | None) -> Path:
    p = Path(path or "").expanduser()
    if not p.is_absolute():
        p = (base_dir if base_dir is not None else Path.cwd()) / p
    return p


# -- grouping and sampling -----------------------------------------------------------------------


def _group_by_dataset(questions: Iterable[Question]) -> list[tuple[str, list[Question]]]:
    groups: dict[str, list[Question]] = {}
    for q in questions:
        groups.setdefault(q.dataset, []).append(q)
    return list(groups.items())


def _select(
    groups: list[tuple[str, list[Question]]], subsets: list[str] | None, *, where: str
) -> list[tuple[str, list[Question]]]:
    if subsets is None:
        return groups
    by_name = dict(groups)
    missing = [s for s in subsets if s not in by_name]
    if missing:
        raise UserError(
            f"unknown subset(s) {', '.join(missing)}. Available subsets: {', '.join(by_name)}",
            file=where,
            field="dataset.subsets",
        )
    return [(s, by_name[s]) for s in dict.fromkeys(subsets)]


def _sample(questions: list[Question], limit: int | None, seed: int) -> list[Question]:
    if limit is None or limit >= len(questions):
        return list(questions)
    # A fresh generator per subset: adding or dropping another subset never changes this sample.
    picked = set(random.Random(seed).sample(range(len(questions)), limit))
    # File order, not draw order, so transcripts and tables read in the benchmark's own order.
    return [q for i, q in enumerate(questions) if i in picked]


# -- record parsing ------------------------------------------------------------------------------


def _load_jsonl(path: Path, *, default_dataset: str, use_dataset_field: bool) -> list[Question]:
    if special_kind(path):
        raise not_regular(path, what="dataset file", field="dataset.path")
    if not path.is_file():
        raise UserError("no such file. Check the dataset path", file=str(path), field="dataset.path")
    questions: list[Question] = []
    first_line: dict[tuple[str, str], int] = {}
    text = read_text(path, what="dataset file", fix="Check the dataset path", field="dataset.path")
    for lineno, line in enumerate(lines_of(text), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        q = _parse_record(line, where, default_dataset, use_dataset_field)
        key = (q.dataset, q.qid)
        if key in first_line:
            raise UserError(
                f"duplicate id {q.qid!r} in dataset {q.dataset!r} (first on line "
                f"{first_line[key]}). Give every record a unique realidx",
                file=where,
                field="realidx",
            )
        first_line[key] = lineno
        questions.append(q)
    return questions


def _parse_record(line: str, where: str, default_dataset: str, use_dataset_field: bool) -> Question:
    raw = load_line(line, where)
    if not isinstance(raw, dict):
        raise UserError(
            f"expected a JSON object, got {type(raw).__name__}. Write one JSON object per line",
            file=where,
        )
    for name in _REQUIRED:
        if name not in raw:
            raise UserError(
                f"missing field. Every record needs {', '.join(_REQUIRED)}", file=where, field=name
            )

    text = raw["question"]
    if not isinstance(text, str) or not text.strip():
        raise UserError("must be a non-empty string. Put the stem here", file=where, field="question")

    options = _parse_options(raw["options"], where)
    gold = _parse_gold(raw["answer_idx"], options, where)

    qid = raw["realidx"]
    # bool is an int subclass; `true` as an id is certainly a mistake.
    if isinstance(qid, bool) or not isinstance(qid, (int, str)) or str(qid).strip() == "":
        raise UserError(
            f"must be a non-empty string or integer, got {qid!r}. Give every record a unique id",
            file=where,
            field="realidx",
        )

    if (isinstance(qid, int) and abs(qid) >= 10 ** MAX_ID_CHARS) or len(str(qid)) > MAX_ID_CHARS:
        raise UserError(f"is longer than {MAX_ID_CHARS} characters. Give a shorter id", file=where, field="realidx")

    dataset = default_dataset
    if use_dataset_field and "dataset" in raw:
        dataset = raw["dataset"]
        if not isinstance(dataset, str) or not dataset.strip():
            raise UserError(
                f"must be a non-empty string, got {dataset!r}. Name the subset or drop the field",
                file=where,
                field="dataset",
            )
        dataset = dataset.strip()
        if len(dataset) > MAX_ID_CHARS:
            raise UserError(f"is longer than {MAX_ID_CHARS} characters. Name the subset briefly", file=where,
                            field="dataset")
    storable(str(qid), where, "realidx")
    storable(dataset, where, "dataset")
    storable(text, where, "question")
    for letter, option in options.items():
        storable(option, where, f"options.{letter}")

    multi = raw.get("multi_answer", False)
    if not isinstance(multi, bool):
        raise UserError(
            f"must be true or false, got {multi!r}. Declare a select-all item with multi_answer: true",
            file=where,
            field="multi_answer",
        )

    return Question(
        dataset=dataset,
        qid=str(qid).strip(),
        text=text.strip(),
        options=options,
        gold=gold,
        multi_answer=multi,
    )


def _parse_options(value: object, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise UserError(
            f"must be an object of letter -> text, got {type(value).__name__}. "
            'Write options as {"A": "...", "B": "..."}',
            file=where,
            field="options",
        )
    if len(value) < 2:
        raise UserError(f"has {len(value)} option(s). Give at least two options", file=where, field="options")
    for letter, text in value.items():
        if not _LETTER.fullmatch(letter) or not isinstance(text, str):
            raise UserError(
                f"bad option {letter!r}: {text!r}. Keys must be single capital letters and values strings",
                file=where,
                field="options",
            )
    empty = [letter for letter in sorted(value) if not value[letter].strip()]
    if empty:
        raise UserError(f"option {empty[0]} has no text. Give every option its text, or drop it", file=where,
                        field=f"options.{empty[0]}")
    return {letter: value[letter].strip() for letter in sorted(value)}


def _parse_gold(value: object, options: dict[str, str], where: str) -> tuple[str, ...]:
    letters = ", ".join(options)
    if not isinstance(value, str):
        raise UserError(
            f"must be a string of letters like 'B' or 'A,C', got {value!r}",
            file=where,
            field="answer_idx",
        )
    parts = [p.strip() for p in value.split(",")]
    if not all(parts):
        raise UserError(
            f"{value!r} has an empty letter. Use one of {letters}, or several joined by commas",
            file=where,
            field="answer_idx",
        )
    bad = [p for p in parts if p not in options]
    if bad:
        raise UserError(
            f"gold {', '.join(map(repr, bad))} is not among the options {letters}. "
            "Fix answer_idx or the options",
            file=where,
            field="answer_idx",
        )
    return tuple(sorted(set(parts)))
