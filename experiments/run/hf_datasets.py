"""`dataset: {source: hf, ...}`: questions from local Hugging Face `datasets` files, offline.

The data is read through the `datasets` library (the `[hf]` extra): a folder written by
`Dataset.save_to_disk` / `DatasetDict.save_to_disk`, a parquet file, or a JSONL file. A field
mapping (`fields:`, or a `preset:` of the common medical benchmarks, `hf_presets.py`) says which
columns hold the stem, the options, the answer and the id. Only mapped columns reach a `Question`:
explanations, long answers and other gold-revealing columns are never read.

No row is mapped silently wrong: every option must be text (a dict read as text is refused), the
gold must be one of the options, an integer answer's base must be known (see `HFFields.index_base`),
and a hidden label (-1) is refused with the labelled split to use.

Nothing is downloaded: the loader sets `HF_DATASETS_OFFLINE` / `HF_HUB_OFFLINE` before it touches
the library, and a hub name without a local copy is one line saying how to save it locally.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from medpanel.agents.types import Question
from medpanel.experiments.errors import UserError
from medpanel.experiments.run.hf_presets import LETTERS, HFFields, resolve_fields

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def _save_hint(name: str, split: str) -> str:
    return (f"is not a local file or folder, and nothing is downloaded. Save it once where the hub is reachable: "
            f"python -c \"import datasets; datasets.load_dataset('{name}', split='{split}')"
            f".save_to_disk('data/{name.split('/')[-1]}')\", then set dataset.path to that folder")


def _library() -> Any:
    # Offline before the first import: `datasets` reads these flags when it loads its config.
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        import datasets
    except ImportError:
        raise UserError("source 'hf' needs the datasets library: pip install 'medpanel[hf]'",
                        field="dataset.source") from None
    datasets.config.HF_DATASETS_OFFLINE = True  # already imported by someone else: the same flag
    datasets.config.HF_HUB_OFFLINE = True
    return datasets


def _rows(path: Path, split: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows and the columns' features (a `ClassLabel` answer says its own base)."""
    lib = _library()
    where = str(path)
    with tempfile.TemporaryDirectory(prefix="medpanel-hf-") as cache:
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
                raise UserError("is not a save_to_disk folder, a .parquet or a .jsonl file. Point dataset.path "
                                "at one of these", file=where, field="dataset.path")
            return list(ds.to_list()), dict(ds.features)
        except UserError:
            raise
        except (FileNotFoundError, ValueError, OSError) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UserError(f"cannot be read by datasets ({msg}). Check that it is a save_to_disk folder, a "
                            f"parquet or a JSONL file", file=where, field="dataset.path") from None
        except Exception as exc:  # pyarrow raises its own errors for damaged files
            raise UserError(f"cannot be read by datasets ({type(exc).__name__}: {str(exc)[:200]}). Check the file",
                            file=where, field="dataset.path") from None


def _get(row: dict[str, Any], column: str, where: str) -> Any:
    value: Any = row
    for part in column.split("."):
        if not isinstance(value, dict) or part not in value:
            raise UserError(f"has no column {column!r} (columns: {', '.join(row)}). Fix dataset.fields or the preset",
                            file=where, field="dataset.fields")
        value = value[part]
    return value


def _text(value: Any, letter: str, where: str) -> str:
    # A dict or a list here is a layout the mapping does not fit (bigbio's {key, value} read as text).
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UserError(f"option {letter} is {type(value).__name__} {str(value)[:60]!r}, not text: the options "
                        "mapping does not fit this layout. Fix dataset.fields.options or the preset", file=where,
                        field="dataset.fields.options")
    return str(value)


def _options(row: dict[str, Any], f: HFFields, where: str) -> dict[str, str]:
    if f.choices is not None:
        texts: list[Any] = list(f.choices)
    elif isinstance(f.options, list):
        texts = [_get(row, c, where) for c in f.options]
    elif f.options is not None:
        value = _get(row, f.options, where)
        if isinstance(value, dict):
            # Arrow gives every row the union of the keys: a 4-option row has E: None.
            return {str(k).strip().upper(): _text(v, str(k), where) for k, v in value.items() if v is not None}
        if not isinstance(value, list):
            raise UserError(f"column {f.options!r} is neither a letter->text dict nor a list",
                            file=where, field="dataset.fields.options")
        if value and all(isinstance(v, dict) and set(v) == {"key", "value"} for v in value):
            return {str(v["key"]).strip().upper(): _text(v["value"], str(v["key"]), where) for v in value}  # bigbio
        texts = value
    else:
        raise UserError("dataset.fields needs options (a column or columns) or choices (fixed texts)",
                        file=where, field="dataset.fields")
    return {LETTERS[i]: _text(t, LETTERS[i], where) for i, t in enumerate(texts)}


def _values(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _index_base(f: HFFields, answers: list[Any], sizes: list[int], feature: Any, where: str) -> int:
    """The base of the integer answers: the user's, a ClassLabel's (0), or what the answers prove."""
    if f.index_base is not None:
        return f.index_base
    if type(feature).__name__ == "ClassLabel":
        return 0
    ints = [(v, n) for a, n in zip(answers, sizes, strict=True) for v in _values(a)
            if isinstance(v, int) and not isinstance(v, bool)]
    if not ints:
        return 0  # no integer answer: the base is never used
    for v, n in ints:
        if v > n:
            raise UserError(f"answer index {v} is outside the {n} options under either base", file=where,
                            field="dataset.fields.answer")
    zero = any(v == 0 for v, _ in ints)
    top = any(v == n for v, n in ints)
    if zero and top:
        raise UserError(f"answers in {f.answer!r} include 0 and the number of options: neither 0- nor 1-based fits. "
                        "Check dataset.fields.answer", file=where, field="dataset.fields.answer")
    if zero or top:
        return 0 if zero else 1
    raise UserError(f"answers in {f.answer!r} are integers that fit both a 0-based and a 1-based index. Say which: "
                    "dataset.fields.index_base: 0 (openlifescienceai/medmcqa, cais/mmlu) or 1 (the original MedMCQA "
                    "release JSON)", file=where, field="dataset.fields.index_base")


def _check_labelled(value: Any, where: str) -> None:
    # Checked before the base is inferred: a split of -1s would otherwise read as an ambiguous base.
    for v in _values(value):
        if isinstance(v, int) and not isinstance(v, bool) and v < 0:
            raise UserError(f"answer {v} marks a hidden label: this split publishes no answers (MedMCQA's test "
                            "split). Use a labelled split: dataset.split: validation (or the validation file)",
                            file=where, field="dataset.split")


def _gold(value: Any, options: dict[str, str], f: HFFields, base: int, where: str) -> tuple[str, ...]:
    values = _values(value)
    if not values:
        raise UserError(f"answer {value!r} is empty: the row has no gold", file=where, field="dataset.fields.answer")
    return tuple(dict.fromkeys(_one_gold(v, options, f, base, where) for v in values))


def _one_gold(value: Any, options: dict[str, str], f: HFFields, base: int, where: str) -> str:
    if isinstance(value, bool) or value is None:
        raise UserError(f"answer {value!r} is not a letter, an option text or an index", file=where,
                        field="dataset.fields.answer")
    if isinstance(value, int):
        i = value - base
        if not 0 <= i < len(options):
            raise UserError(f"answer index {value} is outside the {len(options)} options (index_base {base})",
                            file=where, field="dataset.fields.answer")
        return list(options)[i]
    text = str(value).strip()
    if text.upper() in options:
        return text.upper()
    by_text = [k for k, v in options.items() if v.strip().lower() == text.lower()]
    if len(by_text) == 1:
        return by_text[0]
    raise UserError(f"answer {text!r} is neither an option letter ({', '.join(options)}) nor one option's text",
                    file=where, field="dataset.fields.answer")


def load_hf(path: str, split: str, preset: str | None, fields: dict[str, Any] | None, *, name: str,
            base_dir: Path | None) -> list[Question]:
    """Every row of the local dataset at `path` as a `Question`, in file order.

    The mapping is the preset's layout that fits the data's columns, with the user's `fields` on top."""
    file = Path(path).expanduser()
    if not file.is_absolute():
        file = (base_dir or Path.cwd()) / file
    if not file.exists():
        if _HUB_NAME.match(path) and not Path(path).parts[0].startswith("."):
            raise UserError(f"{path!r} {_save_hint(path, split)}", field="dataset.path")
        raise UserError("no such file or folder. Point dataset.path at a save_to_disk folder, a parquet or a "
                        "JSONL file (relative paths are resolved against the scenario's folder)",
                        file=str(file), field="dataset.path")
    rows, features = _rows(file, split)
    if not rows:
        raise UserError(f"split {split!r} has no rows", file=str(file), field="dataset.split")
    f = resolve_fields(preset, fields, list(features) or list(rows[0]), str(file))
    mapped = []
    for n, row in enumerate(rows):
        where = f"{file} (row {n})"
        options = _options(row, f, where)
        if len(options) < 2:
            raise UserError("has fewer than two options", file=where, field="dataset.fields.options")
        answer = _get(row, f.answer, where)
        _check_labelled(answer, where)
        mapped.append((where, row, options, answer))
    base = _index_base(f, [m[3] for m in mapped], [len(m[2]) for m in mapped], features.get(f.answer), str(file))
    out = []
    for n, (where, row, options, answer) in enumerate(mapped):
        text = str(_get(row, f.question, where))
        if f.context:
            ctx = _get(row, f.context, where)
            ctx = "\n\n".join(map(str, ctx)) if isinstance(ctx, list) else str(ctx or "")
            text = f"{ctx}\n\n{text}" if ctx else text
        qid = str(_get(row, f.id, where)) if f.id else str(n)
        dataset = str(_get(row, f.dataset, where)) if f.dataset else name
        out.append(Question(dataset=dataset, qid=qid, text=text, options=options,
                            gold=_gold(answer, options, f, base, where)))
    return out
