"""The field mappings of the medical benchmarks as published on the Hugging Face hub (`dataset.preset`).

A benchmark is published in more than one layout (MedQA as GBaker's export, as bigbio's
`*_source` and as bigbio's `*_bigbio_qa`), so a preset is a list of layouts, each recognised by the
columns it needs. The first layout whose columns are all in the data is used; none matching is one
line naming every layout's columns. Nothing is guessed from the values here: the loader
(`hf_datasets.py`) checks every mapped row (options are texts, the gold is among them, an integer
answer's base is known).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from medpanel.experiments.errors import UserError

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


class HFFields(BaseModel):
    """Which columns of the dataset hold medpanel's question fields."""

    model_config = ConfigDict(extra="forbid")

    question: str = "question"
    """The stem's column."""
    options: str | list[str] | None = "options"
    """One column holding a letter->text dict, a list of texts, or a list of `{key, value}` (bigbio's
    `*_source`); or a list of columns, one per option (MedMCQA's `opa`..`opd`). None with `choices`."""
    choices: list[str] | None = None
    """Fixed option texts for every item (PubMedQA's yes/no/maybe); the answer is one of them."""
    answer: str = "answer"
    """The gold column: a letter, an option's text, an index (see `index_base`), or a list of these
    (bigbio's `answer: [text]`)."""
    answer_form: Literal["letter", "text", "index"] | None = None
    """How the gold reads: an option's `letter`, an option's `text` (matched exactly, else ignoring
    case) or an option's `index`. Unset, an integer is an index and a string is a letter or a text,
    and a string that is one option's letter and another option's text is refused as ambiguous."""
    index_base: int | None = Field(default=None, ge=0, le=1)
    """What an integer answer counts from: 0 or 1. Unset, it is known only where the data says so:
    a `ClassLabel` column (0-based), a 0 among the answers (0-based) or an answer equal to the
    number of options (1-based); otherwise the loader refuses and asks for it."""
    id: str | None = None
    """The item id's column; None numbers the rows (`0`, `1` ...) in file order."""
    context: str | None = None
    """A column shown before the stem (PubMedQA's abstract; a dotted path reaches into a dict,
    `context.contexts`); a list of passages is joined by blank lines."""
    dataset: str | None = None
    """A column naming each row's sub-dataset (MMLU's `subject`); default the preset or file name."""


@dataclass(frozen=True)
class Layout:
    """One published layout of a benchmark: its name in messages, its mapping, the columns that identify it."""

    name: str
    fields: HFFields
    needs: tuple[str, ...]


PRESETS: dict[str, tuple[Layout, ...]] = {
    "medqa": (
        # GBaker/MedQA-USMLE-4-options: `options` a letter->text dict. bigbio/med_qa `*_source`: the
        # same columns, `options` a list of {key, value}. `answer` (the text) is not read: `answer_idx` is.
        Layout("GBaker/MedQA-USMLE-4-options or bigbio/med_qa *_source",
               HFFields(question="question", options="options", answer="answer_idx", answer_form="letter"),
               needs=("question", "options", "answer_idx")),
        # bigbio/med_qa `*_bigbio_qa` (what inspect_evals reads): `choices` texts, `answer` a list of texts,
        # read as texts: MedQA has items whose options are letters ("B", "C", "D", "E").
        Layout("bigbio/med_qa *_bigbio_qa",
               HFFields(question="question", options="choices", answer="answer", answer_form="text", id="id",
                        context="context"),
               needs=("question", "choices", "answer", "id")),
    ),
    "medmcqa": (
        # openlifescienceai/medmcqa: `cop` a ClassLabel (0-based; -1 in the test split, whose labels are
        # hidden). The original MedMCQA release JSON has the same columns with `cop` 1-based: in JSON the
        # base is read from the answers or set with index_base. `exp` (the explanation) is never read.
        Layout("openlifescienceai/medmcqa or the MedMCQA release JSON",
               HFFields(question="question", options=["opa", "opb", "opc", "opd"], answer="cop", answer_form="index",
                        id="id"),
               needs=("question", "opa", "opb", "opc", "opd", "cop")),
    ),
    "pubmedqa": (
        # qiaojin/PubMedQA pqa_labeled: yes/no/maybe over the abstract; `long_answer` (the rationale) is not read.
        Layout("qiaojin/PubMedQA pqa_labeled",
               HFFields(question="question", options=None, choices=["yes", "no", "maybe"], answer="final_decision",
                        answer_form="text", id="pubid", context="context.contexts"),
               needs=("question", "final_decision", "context")),
    ),
    "mmlu": (
        # cais/mmlu: `choices` a list, `answer` a ClassLabel (0-based); `subject` names the subject.
        Layout("cais/mmlu", HFFields(question="question", options="choices", answer="answer", answer_form="index",
                                     dataset="subject"),
               needs=("question", "choices", "answer", "subject")),
    ),
}

MMLU_MEDICAL = ("anatomy", "clinical_knowledge", "college_biology", "college_medicine", "medical_genetics",
                "professional_medicine")
"""MMLU's medical subjects (MultiMedQA's selection): the `mmlu` preset's subsets unless `dataset.subsets` says."""


def resolve_fields(preset: str | None, overrides: dict[str, object] | None, columns: list[str],
                   where: str) -> HFFields:
    """The mapping for data with these `columns`: the preset's matching layout, then the user's `fields` keys."""
    base: dict[str, object] = {}
    if preset is not None:
        if preset not in PRESETS:
            raise UserError(f"unknown preset {preset!r}. Use one of: {', '.join(PRESETS)}", field="dataset.preset")
        layouts = PRESETS[preset]
        match = next((lay for lay in layouts if all(c in columns for c in lay.needs)), None)
        if match is None and not overrides:
            wanted = "; or ".join(f"{lay.name} (columns {', '.join(lay.needs)})" for lay in layouts)
            raise UserError(f"matches no layout of preset {preset!r}: {wanted}. Its columns are {', '.join(columns)}; "
                            "map them with dataset.fields", file=where, field="dataset.preset")
        base = (match or layouts[0]).fields.model_dump()
        if overrides and overrides.get("answer", base["answer"]) != base["answer"] and "answer_form" not in overrides:
            base["answer_form"] = None  # the preset's form describes its own answer column, not the user's
    try:
        return HFFields.model_validate({**base, **(overrides or {})})
    except ValueError as exc:
        detail = " ".join(str(exc).splitlines()[1:3])
        raise UserError(f"bad field mapping ({detail}). Keys: {', '.join(HFFields.model_fields)}",
                        field="dataset.fields") from None


def default_subsets(preset: str | None, present: list[str], where: str) -> list[str] | None:
    """The subsets a preset selects when `dataset.subsets` is unset: MMLU's medical subjects; None is all."""
    if preset != "mmlu":
        return None
    chosen = [s for s in MMLU_MEDICAL if s in present]
    if not chosen:
        raise UserError(f"holds none of MMLU's medical subjects ({', '.join(MMLU_MEDICAL)}); its subjects are "
                        f"{', '.join(present[:8])}. Name the ones to run in dataset.subsets", file=where,
                        field="dataset.subsets")
    return chosen
