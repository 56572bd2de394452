"""`dataset: {source: hf, ...}`: questions from local Hugging Face `datasets` files, offline.

The data is read through the `datasets` library (the `[hf]` extra): a folder written by
`Dataset.save_to_disk` / `DatasetDict.save_to_disk`, a parquet file, or a JSONL file; the plain
files publishers ship (CSV, headerless TSV, JSON keyed by id, a folder of per-subset files) are
read by `published_files.py`, which `datasets` would misread. A field
mapping (`fields:`, or a `preset:` of the common medical benchmarks, `hf_presets.py`) says which
columns hold the stem, the options, the answer and the id. Only mapped columns reach a `Question`:
explanations, long answers and other gold-revealing columns are never read.

No row is mapped silently wrong (`hf_values.py`): the stem, every option and a string id must be
non-empty text (a null is never sent as "None", a dict never read as text), ids are unique, the
gold is read as the layout gives it (`HFFields.answer_form`: a letter, an option's text or an
index) and must be one option, an integer answer's base must be known (`HFFields.index_base`),
and a hidden label (-1) is refused with the labelled split to use.

Nothing is downloaded: the loader sets `HF_DATASETS_OFFLINE` / `HF_HUB_OFFLINE` before it touches
the library, and a hub name without a local copy is one line saying how to save it locally.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import cast

from medpanel.agents.types import Question
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.sources import hf_values as check
from medpanel.experiments.run.sources import published_files as published
from medpanel.experiments.run.sources.hf_presets import PUBLISHED, HFFields, preset_header, resolve_fields
from medpanel.experiments.run.sources.quiet import no_widget_notice
from medpanel.inputs import InputFileError, check_input

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _save_hint(name: str, split: str) -> str:
    return (f"is not a local file or folder, and nothing is downloaded. Save it once where the hub is reachable: "
            f"python -c \"import datasets; datasets.load_dataset('{name}', split='{split}')"
            f".save_to_disk('data/{name.split('/')[-1]}')\", then set dataset.path to that folder")


def _library() -> ModuleType:
    # Offline before the first import: `datasets` reads these flags when it loads its config.
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        with no_widget_notice():  # datasets imports tqdm.auto: see quiet.py
            import datasets
    except ImportError:
        raise UserError("source 'hf' needs the datasets library: pip install 'medpanel[hf]'",
                        field="dataset.source") from None
    datasets.config.HF_DATASETS_OFFLINE = True  # already imported by someone else: the same flag
    datasets.config.HF_HUB_OFFLINE = True
    return cast("ModuleType", datasets)  # untyped: its names are reached as the module's attributes


@contextlib.contextmanager
def _quiet(lib: ModuleType) -> Iterator[None]:
    """The library's "Generating train split" bars and notes off while it reads, as they were after:
    a one-line refusal stays one line, and a run's output is medpanel's own."""
    bars = lib.is_progress_bar_enabled()
    verbosity = lib.logging.get_verbosity()
    lib.disable_progress_bars()
    lib.logging.set_verbosity_error()
    try:
        yield
    finally:
        lib.logging.set_verbosity(verbosity)
        if bars:
            lib.enable_progress_bars()


def _rows(path: Path, split: str, header: list[str] | None) -> tuple[list[dict[str, object]], dict[str, object]]:
    """The rows and the columns' features (a `ClassLabel` answer says its own base)."""
    if path.suffix in published.SUFFIXES or published.is_keyed_json(path) or published.is_published_folder(path):
        # A preset's header (MedExQA's TSVs, MMLU's original CSVs) names the columns of its headerless files.
        return published.read_rows(path, header=header, split=split), {}
    lib = _library()
    where = str(path)
    with tempfile.TemporaryDirectory(prefix="medpanel-hf-") as cache, _quiet(lib):
        try:
            if path.is_dir():
                ds = lib.load_from_disk(str(path))
                if isinstance(ds, lib.DatasetDict):
                    if split not in ds:
                        raise UserError(f"has no split {split!r}. Splits: {', '.join(ds)}. Set dataset.split",
                                        file=where, field="dataset.split")
                    ds = ds[split]
            elif path.suffix == ".parquet":
                ds = lib.Dataset.from_parquet(str(path), cache_dir=cache)
            elif path.suffix in (".jsonl", ".json"):
                ds = lib.Dataset.from_json(str(path), cache_dir=cache)
            else:
                raise UserError("is not a save_to_disk folder, a .parquet, .jsonl, .csv or .tsv file. Point "
                                "dataset.path at one of these", file=where, field="dataset.path")
            return list(ds.to_list()), dict(ds.features)
        except UserError:
            raise
        except (FileNotFoundError, ValueError, OSError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UserError(f"cannot be read by datasets ({msg}). Check that it is a save_to_disk folder, a "
                            f"parquet or a JSONL file", file=where, field="dataset.path") from None
        except Exception as exc:  # pyarrow raises its own errors for damaged files
            first = (str(exc).splitlines() or [""])[0][:200]
            raise UserError(f"cannot be read by datasets ({type(exc).__name__}: {first}). Check the file",
                            file=where, field="dataset.path") from None


def _get(row: dict[str, object], column: str, where: str) -> object:
    value: object = row
    for part in column.split("."):
        if value is None:
            return None  # a null on the way (PubMedQA's context): the field's own check says what it needs
        if not isinstance(value, dict) or part not in value:
            raise UserError(f"has no column {column!r} (columns: {', '.join(row)}). Fix dataset.fields or the preset",
                            file=where, field="dataset.fields")
        value = value[part]
    return value


def _options(row: dict[str, object], f: HFFields, where: str) -> tuple[dict[str, str], dict[str, str]]:
    """The options by letter, and each option's key as stored (a letter, or AfriMed-QA's `option3`)."""
    if f.options_json and isinstance(f.options, str):
        raw = _get(row, f.options, where)
        value = check.json_options(raw, f.options, where)
        return check.keyed(value, where)
    opts = _plain_options(row, f, where)
    return opts, {k: k for k in opts}


def _plain_options(row: dict[str, object], f: HFFields, where: str) -> dict[str, str]:
    if f.choices is not None:
        return check.listed(list(f.choices), where)
    if isinstance(f.options, list):
        return check.listed([_get(row, c, where) for c in f.options], where)
    if f.options is None:
        raise UserError("dataset.fields needs options (a column or columns) or choices (fixed texts)",
                        file=where, field="dataset.fields")
    value = _get(row, f.options, where)
    if isinstance(value, dict):
        return check.options(value, where)
    if not isinstance(value, list):
        raise UserError(f"column {f.options!r} is {'null' if value is None else type(value).__name__}, neither a "
                        "letter->text dict nor a list of texts. Fix the row or dataset.fields.options",
                        file=where, field="dataset.fields.options")
    if value and all(isinstance(v, dict) and set(v) == {"key", "value"} for v in value):
        return check.options(value, where)  # bigbio's *_source: a list of {key, value}
    return check.listed(value, where)


def _where(file: Path, n: int, row: dict[str, object], f: HFFields) -> str:
    """A row as a message names it: its number and, where it has one, its id as stored."""
    value = row.get(f.id) if f.id and "." not in f.id else None
    named = isinstance(value, str | int) and not isinstance(value, bool) and str(value).strip()
    return f"{file} (row {n}, id {str(value)[:80]!r})" if named else f"{file} (row {n})"


def _options_and_answer(row: dict[str, object], f: HFFields, where: str) -> tuple[dict[str, str], object, str | None]:
    """The row's options by letter, its answer as the gold check reads it (keys turned into letters,
    a listed answer split) and, where the options close the question column, the stem before them."""
    stem = None
    if f.embedded_options:
        stem, options = check.embedded(_get(row, f.question, where), where)
        keys = {k: k for k in options}
    else:
        options, keys = _options(row, f, where)
    if len(options) < 2:
        raise UserError("has fewer than two options", file=where, field="dataset.fields.options")
    answer = check.separated(_get(row, f.answer, where), f.answer_separator)
    if f.answer_form == "key":
        answer = check.by_key(answer, keys, where)
    if f.answer_form in (None, "index"):
        check.check_labelled(answer, where)
    return options, answer, stem


def load_hf(path: str, split: str, preset: str | None, fields: dict[str, object] | None, *, name: str,
            base_dir: Path | None) -> list[Question]:
    """Every row of the local dataset at `path` as a `Question`, in file order.

    The mapping is the preset's layout that fits the data's columns, with the user's `fields` on top."""
    file = Path(path).expanduser()
    if not file.is_absolute():
        file = (base_dir or Path.cwd()) / file
    if not file.exists():
        if preset in PUBLISHED and not _HUB_NAME.match(path):
            raise UserError(f"no such file or folder. Nothing is downloaded: get {preset} from {PUBLISHED[preset]} "
                            "and point dataset.path at it", file=str(file), field="dataset.path")
        if _HUB_NAME.match(path) and not Path(path).parts[0].startswith("."):
            raise UserError(f"{path!r} {_save_hint(path, split)}", field="dataset.path")
        raise UserError("no such file or folder. Point dataset.path at a save_to_disk folder, a parquet or a "
                        "JSONL file (relative paths are resolved against the scenario's folder)",
                        file=str(file), field="dataset.path")
    if not file.is_dir():  # the library opens it by name: a FIFO or a device is refused first
        try:
            check_input(file, what="dataset file", fix="Point dataset.path at a parquet or a JSONL file")
        except InputFileError as exc:
            raise UserError(exc.reason, file=exc.path, field="dataset.path") from None
    header = cast("list[str] | None", (fields or {}).get("header"))  # checked with the other fields below
    rows, features = _rows(file, split, header or preset_header(preset))
    if not rows:
        raise UserError(f"split {split!r} has no rows", file=str(file), field="dataset.split")
    f = resolve_fields(preset, fields, list(features) or list(rows[0]), str(file))
    # Rows keep their number in the file (messages, numbered ids) when `keep` passes over others.
    numbered = [(n, r) for n, r in enumerate(rows) if not f.keep or all(r.get(c) == v for c, v in f.keep.items())]
    if not numbered:
        raise UserError(f"has no row with {f.keep} (dataset.fields.keep)", file=str(file), field="dataset.fields")
    mapped = []
    for n, row in numbered:
        where = _where(file, n, row, f)
        mapped.append((n, where, row, *_options_and_answer(row, f, where)))
    base = check.index_base(f, [m[4] for m in mapped], [len(m[3]) for m in mapped], features.get(f.answer),
                            str(file))
    out = []
    first: dict[tuple[str, str], int] = {}
    for n, where, row, options, answer, stem in mapped:
        text = check.text(stem if f.embedded_options else _get(row, f.question, where), "question",
                          "dataset.fields.question", where, fix="Every row needs its stem: fix the row or drop it")
        if f.context:
            ctx = check.context(_get(row, f.context, where), where)
            text = f"{ctx}\n\n{text}" if ctx else text
        qid = check.item_id(_get(row, f.id, where), where) if f.id else str(n)
        dataset = check.text(_get(row, f.dataset, where), "dataset", "dataset.fields.dataset", where,
                             fix="Name every row's subset") if f.dataset else name
        if (dataset, qid) in first:
            # Two rows with one id are one pair of the run: one would be dropped and the run never finish.
            raise UserError(f"duplicate id {qid!r} in dataset {dataset!r} (first on row {first[(dataset, qid)]}). "
                            "Give every row a unique id: drop the repeated row or map a unique column in "
                            "dataset.fields.id", file=where, field="dataset.fields.id")
        first[(dataset, qid)] = n
        form = "letter" if f.answer_form == "key" else f.answer_form  # keys were turned into letters above
        out.append(Question(dataset=dataset, qid=qid, text=text, options=options, multi_answer=bool(f.multi_answer),
                            gold=check.gold(answer, options, f.model_copy(update={"answer_form": form}), base,
                                            where)))
    return out
