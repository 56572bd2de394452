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
from medpanel.experiments.run.sources.published_files import FILE_COLUMN, KEY_COLUMN

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
    answer_form: Literal["letter", "text", "index", "key"] | None = None
    """How the gold reads: an option's `letter`, an option's `text` (matched exactly, else ignoring
    case), an option's `index`, or an option's `key` as the options column stores it (AfriMed-QA's
    `option3`: options keyed other than by letter are lettered A, B ... in their order). Unset, an
    integer is an index and a string is a letter or a text, and a string that is one option's letter
    and another option's text is refused as ambiguous."""
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
    """A column naming each row's sub-dataset (MMLU's `subject`); default the preset or file name.
    A folder of CSV/TSV files names each row's file in `_file` (NEJM-QA's specialty)."""
    header: list[str] | None = None
    """The column names of a headerless CSV/TSV file, in order (MedExQA's TSVs)."""
    embedded_options: bool = False
    """The options are the lines `A. text` closing the question column (NEJM-QA); the stem is what
    precedes the first of them. `options` is then not read."""
    options_json: bool = False
    """The options column is JSON text (AfriMed-QA's `answer_options`), decoded before it is read."""
    answer_separator: str | None = None
    """A string answer that lists several golds joined by this (NEJM-QA's `A,C`, AfriMed-QA's
    `option1,option3`); every part is a gold."""
    keep: dict[str, str] | None = None
    """Only rows whose column holds this text are read (AfriMed-QA: `{question_type: mcq}`)."""
    multi_answer: bool | None = None
    """The benchmark's declared item type: true, every item is answered with a set (NEJM-QA);
    unset, the scenario's `dataset.multi_answer` or single-best."""


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
        # pubmedqa/pubmedqa data/ori_pqal.json (1,000) or the test_set.json (500) its preprocess/split_dataset.py
        # writes: an object keyed by PMID; `LONG_ANSWER` and the reasoning_*_pred labels are not read.
        Layout("pubmedqa/pubmedqa ori_pqal.json or test_set.json",
               HFFields(question="QUESTION", options=None, choices=["yes", "no", "maybe"], answer="final_decision",
                        answer_form="text", id=KEY_COLUMN, context="CONTEXTS"),
               needs=("QUESTION", "CONTEXTS", "final_decision", KEY_COLUMN)),
    ),
    "mmlu": (
        # cais/mmlu: `choices` a list, `answer` a ClassLabel (0-based); `subject` names the subject.
        Layout("cais/mmlu", HFFields(question="question", options="choices", answer="answer", answer_form="index",
                                     dataset="subject"),
               needs=("question", "choices", "answer", "subject")),
        # hendrycks/test data/test/<subject>_test.csv (the original release): no header, question, A-D, answer letter.
        Layout("hendrycks/test <subject>_test.csv (no header)",
               HFFields(question="question", options=["A", "B", "C", "D"], answer="answer", answer_form="letter",
                        dataset=FILE_COLUMN, header=["question", "A", "B", "C", "D", "answer"]),
               needs=("question", "A", "B", "C", "D", "answer", FILE_COLUMN)),
    ),
    "mmlu-pro": (
        # TIGER-Lab/MMLU-Pro: up to ten `options` (A-J), `answer` the letter (`answer_index` the same, 0-based);
        # `cot_content` (a worked answer) is not read; `category` names the subject (`health` by default).
        Layout("TIGER-Lab/MMLU-Pro", HFFields(question="question", options="options", answer="answer",
                                              answer_form="letter", id="question_id", dataset="category"),
               needs=("question_id", "question", "options", "answer", "category")),
    ),
    "nejm-qa": (
        # nejm-ai-qa/exams: one CSV per specialty (general_surgery, internal_medicine, obgyn, pediatrics,
        # psychiatry); `question` holds the stem and then the options as `A. text` lines; `answer` the gold
        # letter, or several joined by commas. Every item is answered with a set and scored as one.
        Layout("nejm-ai-qa/exams (a folder of its specialty CSVs, or one of them)",
               HFFields(question="question", options=None, embedded_options=True, answer="answer",
                        answer_form="letter", answer_separator=",", dataset=FILE_COLUMN, multi_answer=True),
               needs=("question", "answer", FILE_COLUMN)),
    ),
    "medbullets": (
        # HanjieChen/ChallengeClinicalQA medbullets/medbullets_op5.csv (and _op4.csv without `ope`);
        # `answer` (the text) and `explanation` are not read; `link` is not unique, so rows are numbered.
        Layout("HanjieChen/ChallengeClinicalQA medbullets_op5.csv",
               HFFields(question="question", options=["opa", "opb", "opc", "opd", "ope"], answer="answer_idx",
                        answer_form="letter"),
               needs=("question", "opa", "opb", "opc", "opd", "ope", "answer_idx")),
        Layout("HanjieChen/ChallengeClinicalQA medbullets_op4.csv",
               HFFields(question="question", options=["opa", "opb", "opc", "opd"], answer="answer_idx",
                        answer_form="letter"),
               needs=("question", "opa", "opb", "opc", "opd", "answer_idx")),
    ),
    "medexqa": (
        # knowlab/MedExQA (bluesky333/MedExQA) test/<subject>_test.tsv: no header, columns question, A-D, two
        # explanations (never read), answer; the subject is the file's name.
        Layout("knowlab/MedExQA <subject>_test.tsv (no header)",
               HFFields(question="question", options=["A", "B", "C", "D"], answer="answer", answer_form="letter",
                        dataset=FILE_COLUMN, header=["question", "A", "B", "C", "D", "exp0", "exp1", "answer"]),
               needs=("question", "A", "B", "C", "D", "answer", FILE_COLUMN)),
    ),
    "afrimedqa": (
        # intronhealth/afrimedqa_v2 CSV: `answer_options` JSON text {"option1": ..., "option5": ...}, `correct_answer`
        # the key (`option3`, several joined by commas); only `question_type: mcq` rows (the others are short
        # answers and consumer queries); `answer_rationale` is not read. The publisher marks no item as
        # several-answer (they are `mcq` rows like the rest), and telling only those items apart would tell
        # the agents something of the answer: so every item is asked select-all and scored as an exact set,
        # as NEJM-QA's are (any-of beside it in Table 8).
        Layout("intronhealth/afrimedqa_v2",
               HFFields(question="question", options="answer_options", options_json=True, answer="correct_answer",
                        answer_form="key", answer_separator=",", id="sample_id", keep={"question_type": "mcq"},
                        multi_answer=True),
               needs=("sample_id", "question", "answer_options", "correct_answer", "question_type")),
    ),
}

PUBLISHED = {
    "medqa": "https://github.com/jind11/MedQA (test split: 1,273 questions; GBaker/MedQA-USMLE-4-options on the hub)",
    "medmcqa": "https://huggingface.co/datasets/openlifescienceai/medmcqa",
    "pubmedqa": "https://github.com/pubmedqa/pubmedqa (data/ori_pqal.json; test_set.json from preprocess/"
                "split_dataset.py pqal) or qiaojin/PubMedQA pqa_labeled on the hub",
    "mmlu": "https://huggingface.co/datasets/cais/mmlu or https://github.com/hendrycks/test (data/test/*.csv)",
    "mmlu-pro": "https://huggingface.co/datasets/TIGER-Lab/MMLU-Pro",
    "nejm-qa": "https://huggingface.co/datasets/nejm-ai-qa/exams (five specialty CSVs)",
    "medbullets": "https://github.com/HanjieChen/ChallengeClinicalQA (medbullets/medbullets_op5.csv)",
    "medexqa": "https://github.com/knowlab/MedExQA (data: https://huggingface.co/datasets/bluesky333/MedExQA, "
               "test/<subject>_test.tsv)",
    "afrimedqa": "https://huggingface.co/datasets/intronhealth/afrimedqa_v2 (gated: accept its terms first)",
}
"""Where each preset's benchmark is published: named when its file is missing (nothing is downloaded)."""

DEFAULT_SUBSETS = {"mmlu": ("anatomy", "clinical_knowledge", "college_biology", "college_medicine",
                            "medical_genetics", "professional_medicine"),
                   "mmlu-pro": ("health",)}
"""A preset's subsets when `dataset.subsets` is unset: MMLU's medical subjects (MultiMedQA's selection),
MMLU-Pro's `health` category."""

MMLU_MEDICAL = DEFAULT_SUBSETS["mmlu"]
"""MMLU's medical subjects (MultiMedQA's selection): the `mmlu` preset's subsets unless `dataset.subsets` says."""


def preset_header(preset: str | None) -> list[str] | None:
    """The column names a preset gives a headerless file (MedExQA's TSVs), read before the columns are known."""
    for layout in PRESETS.get(preset or "", ()):
        if layout.fields.header:
            return layout.fields.header
    return None


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
    """The subsets a preset selects when `dataset.subsets` is unset (MMLU's medical subjects, MMLU-Pro's
    health); None is all."""
    if preset not in DEFAULT_SUBSETS:
        return None
    wanted = DEFAULT_SUBSETS[preset]
    chosen = [s for s in wanted if s in present]
    if not chosen:
        what = "MMLU's medical subjects" if preset == "mmlu" else f"{preset}'s default subsets"
        raise UserError(f"holds none of {what} ({', '.join(wanted)}); its subjects are "
                        f"{', '.join(present[:8])}. Name the ones to run in dataset.subsets", file=where,
                        field="dataset.subsets")
    return chosen
