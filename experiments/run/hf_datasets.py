"""`dataset: {source: hf, ...}`: questions from local Hugging Face `datasets` files, offline.

The data is read through the `datasets` library (the `[hf]` extra): a folder written by
`Dataset.save_to_disk` / `DatasetDict.save_to_disk`, a parquet file, or a JSONL file. A field
mapping (`fields:`, or a `preset:` of the common medical benchmarks) says which columns hold the
stem, the options, the answer and the id. Only mapped columns reach a `Question`: explanations,
long answers and other gold-revealing columns are never read.

Nothing is downloaded: the loader sets `HF_DATASETS_OFFLINE` / `HF_HUB_OFFLINE` before it touches
the library, and a hub name without a local copy is one line saying how to save it locally.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from medpanel.agents.types import Question
from medpanel.experiments.errors import UserError

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class HFFields(BaseModel):
    """Which columns of the dataset hold medpanel's question fields."""

    model_config = ConfigDict(extra="forbid")

    question: str = "question"
    """The stem's column."""
    options: str | list[str] | None = "options"
    """One column holding a letter->text dict or a list of texts, or a list of columns, one per
    option (MedMCQA's `opa`..`opd`). None with `choices` for fixed options."""
    choices: list[str] | None = None
    """Fixed option texts for every item (PubMedQA's yes/no/maybe); the answer is one of them."""
    answer: str = "answer"
    """The gold column: a letter, an option's text, or an index (see `index_base`)."""
    index_base: int = Field(default=0, ge=0, le=1)
    """What an integer answer counts from: 0 (MedMCQA's `cop`, MMLU's `answer`) or 1."""
    id: str | None = None
    """The item id's column; None numbers the rows (`0`, `1` ...) in file order."""
    context: str | None = None
    """A column shown before the stem (PubMedQA's abstract; a dotted path reaches into a dict,
    `context.contexts`); a list of passages is joined by blank lines."""
    dataset: str | None = None
    """A column naming each row's sub-dataset (MMLU's `subject`); default the preset or file name."""


PRESETS: dict[str, HFFields] = {
    # MedQA (USMLE, 4 options): GBaker/MedQA-USMLE-4-options and bigbio-style exports.
    "medqa": HFFields(question="question", options="options", answer="answer_idx"),
    # MedMCQA: four option columns, `cop` the 0-based index of the correct one.
    "medmcqa": HFFields(question="question", options=["opa", "opb", "opc", "opd"], answer="cop", id="id"),
    # PubMedQA (pqa_labeled): yes/no/maybe over the abstract; `long_answer` (the rationale) is not read.
    "pubmedqa": HFFields(question="question", options=None, choices=["yes", "no", "maybe"],
                         answer="final_decision", id="pubid", context="context.contexts"),
    # MMLU's medical subsets (cais/mmlu: anatomy, clinical_knowledge, college_medicine, medical_genetics,
    # professional_medicine, college_biology): `choices` a list, `answer` a 0-based index.
    "mmlu": HFFields(question="question", options="choices", answer="answer", dataset="subject"),
}

MMLU_MEDICAL = ("anatomy", "clinical_knowledge", "college_biology", "college_medicine", "medical_genetics",
                "professional_medicine")


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


def _rows(path: Path, split: str) -> list[dict[str, Any]]:
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
            return list(ds.to_list())
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


def _options(row: dict[str, Any], f: HFFields, where: str) -> dict[str, str]:
    if f.choices is not None:
        texts: list[Any] = list(f.choices)
    elif isinstance(f.options, list):
        texts = [_get(row, c, where) for c in f.options]
    elif f.options is not None:
        value = _get(row, f.options, where)
        if isinstance(value, dict):
            return {str(k).strip().upper(): str(v) for k, v in value.items() if v is not None}
        if not isinstance(value, list):
            raise UserError(f"column {f.options!r} is neither a letter->text dict nor a list",
                            file=where, field="dataset.fields.options")
        texts = value
    else:
        raise UserError("dataset.fields needs options (a column or columns) or choices (fixed texts)",
                        file=where, field="dataset.fields")
    return {LETTERS[i]: str(t) for i, t in enumerate(texts)}


def _gold(value: Any, options: dict[str, str], f: HFFields, where: str) -> str:
    if isinstance(value, bool) or value is None:
        raise UserError(f"answer {value!r} is not a letter, an option text or an index", file=where,
                        field="dataset.fields.answer")
    if isinstance(value, int):
        i = value - f.index_base
        if not 0 <= i < len(options):
            raise UserError(f"answer index {value} is outside the {len(options)} options (index_base "
                            f"{f.index_base})", file=where, field="dataset.fields.answer")
        return list(options)[i]
    text = str(value).strip()
    if text.upper() in options:
        return text.upper()
    by_text = [k for k, v in options.items() if v.strip().lower() == text.lower()]
    if len(by_text) == 1:
        return by_text[0]
    raise UserError(f"answer {text!r} is neither an option letter ({', '.join(options)}) nor one option's text",
                    file=where, field="dataset.fields.answer")


def load_hf(path: str, split: str, fields: HFFields, *, name: str, base_dir: Path | None) -> list[Question]:
    """Every row of the local dataset at `path` as a `Question`, in file order."""
    file = Path(path).expanduser()
    if not file.is_absolute():
        file = (base_dir or Path.cwd()) / file
    if not file.exists():
        if _HUB_NAME.match(path) and not Path(path).parts[0].startswith("."):
            raise UserError(f"{path!r} {_save_hint(path, split)}", field="dataset.path")
        raise UserError("no such file or folder. Point dataset.path at a save_to_disk folder, a parquet or a "
                        "JSONL file (relative paths are resolved against the scenario's folder)",
                        file=str(file), field="dataset.path")
    out = []
    for n, row in enumerate(_rows(file, split)):
        where = f"{file} (row {n})"
        options = _options(row, fields, where)
        if len(options) < 2:
            raise UserError("has fewer than two options", file=where, field="dataset.fields.options")
        text = str(_get(row, fields.question, where))
        if fields.context:
            ctx = _get(row, fields.context, where)
            ctx = "\n\n".join(map(str, ctx)) if isinstance(ctx, list) else str(ctx)
            text = f"{ctx}\n\n{text}" if ctx else text
        qid = str(_get(row, fields.id, where)) if fields.id else str(n)
        dataset = str(_get(row, fields.dataset, where)) if fields.dataset else name
        out.append(Question(dataset=dataset, qid=qid, text=text, options=options,
                            gold=(_gold(_get(row, fields.answer, where), options, fields, where),)))
    return out
