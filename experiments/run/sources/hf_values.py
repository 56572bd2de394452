"""The values of one mapped Hugging Face row, checked before they become a `Question`.

Arrow hands the loader whatever the file holds: a null question, a number where a text belongs, an
empty option, an id that repeats. Nothing here is turned into text with `str()`: a value that is not
the text or the index its field needs stops the load with one line naming the row and the fix.

A gold is read in the layout's own terms (`HFFields.answer_form`): an option's letter, an option's
text (bigbio's `*_bigbio_qa`, PubMedQA's yes/no/maybe) or an option's index. Read as a letter first,
a text gold whose options are themselves letters (a blood group's O, A, B, AB) names the wrong
option; with no form given, a gold that reads as one option's letter and another option's text is
refused rather than guessed.
"""

from __future__ import annotations

import json
import re
from typing import TypeGuard, cast

from medpanel.experiments.errors import UserError
from medpanel.experiments.run.sources.hf_presets import LETTERS, HFFields
from medpanel.experiments.run.store.jsonline import MAX_ID_CHARS, storable

_ANSWER = "dataset.fields.answer"
_FORM_FIX = ("Say how the answer column reads: dataset.fields.answer_form: text (an option's text), letter "
             "(an option's letter) or index")


def _kind(value: object) -> str:
    return "null" if value is None else f"{type(value).__name__} {str(value)[:60]!r}"


def text(value: object, what: str, field: str, where: str, *, fix: str) -> str:
    """A non-empty string as stored (stripped), or one line saying what the row holds instead."""
    if not isinstance(value, str):
        raise UserError(f"{what} is {_kind(value)}, not text. {fix}", file=where, field=field)
    if not value.strip():
        raise UserError(f"{what} is empty. {fix}", file=where, field=field)
    storable(value, where, field)
    return value.strip()


def option_text(value: object, letter: str, where: str) -> str:
    if isinstance(value, dict | list):
        # bigbio's {key, value} or a nested list read as one option: the mapping, not the row, is wrong.
        raise UserError(f"option {letter} is {_kind(value)}, not text: the options mapping does not fit this "
                        "layout. Fix dataset.fields.options or the preset", file=where,
                        field="dataset.fields.options")
    return text(value, f"option {letter}", "dataset.fields.options", where,
                fix="Every option needs its text as a string: fix the row or drop it")


def item_id(value: object, where: str) -> str:
    """An id column's value: a non-empty string or an integer (PubMedQA's `pubid`)."""
    if isinstance(value, int) and not isinstance(value, bool):
        qid = str(value)
    else:
        qid = text(value, "id", "dataset.fields.id", where,
                   fix="Give every row its id, or map another column in dataset.fields.id")
    if len(qid) > MAX_ID_CHARS:
        raise UserError(f"id is longer than {MAX_ID_CHARS} characters. Map a shorter id column in "
                        "dataset.fields.id", file=where, field="dataset.fields.id")
    return qid


def context(value: object, where: str) -> str:
    """The text shown before the stem: none (null or empty), a string, or a list of passages."""
    fix = "Point dataset.fields.context at a text or a list of texts (context.contexts in PubMedQA)"
    if value is None:
        return ""
    if isinstance(value, list):
        parts = [text(v, f"context passage {i + 1}", "dataset.fields.context", where, fix=fix)
                 for i, v in enumerate(value)]
        return "\n\n".join(parts)
    if isinstance(value, str) and not value.strip():
        return ""
    return text(value, "context", "dataset.fields.context", where, fix=fix)


def options(value: object, where: str) -> dict[str, str]:
    """A letter->text dict (GBaker's) or bigbio's list of {key, value}; a null after the last text is
    Arrow's union of keys (a 4-option row of a 5-option file), a null before one is a missing option."""
    rows = cast("list[dict[str, object]]", value)  # bigbio's list, as Arrow gives it
    pairs = list(value.items()) if isinstance(value, dict) else [(v["key"], v["value"]) for v in rows]
    while pairs and pairs[-1][1] is None:
        pairs.pop()
    out: dict[str, str] = {}
    for key, v in pairs:
        letter = key.strip().upper() if isinstance(key, str) else ""
        if len(letter) != 1 or letter not in LETTERS or letter in out:
            raise UserError(f"option key {key!r} is not a letter of its own (A, B, C ...). Fix the options' keys",
                            file=where, field="dataset.fields.options")
        out[letter] = option_text(v, letter, where)
    return out


def listed(texts: list[object], where: str) -> dict[str, str]:
    return {LETTERS[i]: option_text(t, LETTERS[i], where) for i, t in enumerate(texts)}


# -- the gold ----------------------------------------------------------------------------------------------------


def values(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else [value]


def is_index(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def index_base(f: HFFields, answers: list[object], sizes: list[int], feature: object, where: str) -> int:
    """The base of the integer answers: the user's, a ClassLabel's (0), or what the answers prove."""
    if f.index_base is not None:
        return f.index_base
    if type(feature).__name__ == "ClassLabel":
        return 0
    ints = [(v, n) for a, n in zip(answers, sizes, strict=True) for v in values(a) if is_index(v)]
    if not ints or f.answer_form in ("letter", "text"):
        return 0  # no integer is read as an index: the base is never used
    for v, n in ints:
        if v > n:
            raise UserError(f"answer index {v} is outside the {n} options under either base", file=where,
                            field=_ANSWER)
    zero = any(v == 0 for v, _ in ints)
    top = any(v == n for v, n in ints)
    if zero and top:
        raise UserError(f"answers in {f.answer!r} include 0 and the number of options: neither 0- nor 1-based fits. "
                        "Check dataset.fields.answer", file=where, field=_ANSWER)
    if zero or top:
        return 0 if zero else 1
    raise UserError(f"answers in {f.answer!r} are integers that fit both a 0-based and a 1-based index. Say which: "
                    "dataset.fields.index_base: 0 (openlifescienceai/medmcqa, cais/mmlu) or 1 (the original MedMCQA "
                    "release JSON)", file=where, field="dataset.fields.index_base")


def check_labelled(value: object, where: str) -> None:
    # Checked before the base is inferred: a split of -1s would otherwise read as an ambiguous base.
    for v in values(value):
        if is_index(v) and v < 0:
            raise UserError(f"answer {v} marks a hidden label: this split publishes no answers (MedMCQA's test "
                            "split). Use a labelled split: dataset.split: validation (or the validation file)",
                            file=where, field="dataset.split")


def gold(value: object, opts: dict[str, str], f: HFFields, base: int, where: str) -> tuple[str, ...]:
    got = values(value)
    if not got:
        raise UserError(f"answer {value!r} is empty: the row has no gold", file=where, field=_ANSWER)
    return tuple(dict.fromkeys(_one(v, opts, f.answer_form, base, where) for v in got))


def _by_text(answer: str, opts: dict[str, str]) -> list[str]:
    """The options whose text is the answer: exact matches, else matches ignoring case."""
    exact = [k for k, v in opts.items() if v == answer]
    return exact or [k for k, v in opts.items() if v.casefold() == answer.casefold()]


def _one(value: object, opts: dict[str, str], form: str | None, base: int, where: str) -> str:
    letters = ", ".join(opts)
    if form == "index" or (form is None and is_index(value)):
        if not is_index(value):
            raise UserError(f"answer is {_kind(value)}, not an option's index as this layout's answers are. Fix "
                            "the row, or set dataset.fields.answer_form to how the column reads (text, letter)",
                            file=where, field=_ANSWER)
        i = value - base
        if not 0 <= i < len(opts):
            raise UserError(f"answer index {value} is outside the {len(opts)} options (index_base {base})",
                            file=where, field=_ANSWER)
        return list(opts)[i]
    if not isinstance(value, str) or not value.strip():
        what = "empty" if isinstance(value, str) else f"{_kind(value)}, not a letter or an option's text"
        raise UserError(f"answer is {what}. Give the row its gold", file=where, field=_ANSWER)
    answer = value.strip()
    letter = answer.upper() if answer.upper() in opts else None
    by_text = _by_text(answer, opts)
    if form == "letter":
        if letter is None:
            raise UserError(f"answer {answer!r} is not an option letter ({letters}); this layout's answers are "
                            "letters (dataset.fields.answer_form: letter)", file=where, field=_ANSWER)
        return letter
    if len(by_text) > 1:
        raise UserError(f"answer {answer!r} is the text of options {' and '.join(by_text)}: which one is gold "
                        "cannot be told. Fix the row's options or drop the row", file=where, field=_ANSWER)
    if form == "text":
        if not by_text:
            raise UserError(f"answer {answer!r} is none of the option texts; this layout's answers are texts "
                            "(dataset.fields.answer_form: text)", file=where, field=_ANSWER)
        return by_text[0]
    if by_text and letter is not None and by_text[0] != letter:
        raise UserError(f"answer {answer!r} is option {by_text[0]}'s text and also the letter of option {letter} "
                        f"({opts[letter][:40]!r}). {_FORM_FIX}", file=where, field="dataset.fields.answer_form")
    found = by_text[0] if by_text else letter
    if found is None:
        raise UserError(f"answer {answer!r} is neither an option letter ({letters}) nor one option's text",
                        file=where, field=_ANSWER)
    return found


# -- the layouts of published plain files (published_files.py) ------------------------------------------------

_OPTION_LINE = re.compile(r"^\s*\(?([A-J])[.)]\s+(\S.*)$")


def embedded(value: object, where: str) -> tuple[str, dict[str, str]]:
    """NEJM-QA's question column: the stem, then one `A. text` line per option (A, B, C ... in order).

    The options are the run of option lines closing the text, which must read A, B, C ... without a
    gap; a row that does not (an option spread over two lines, a misnumbered one) is refused."""
    body = text(value, "question", "dataset.fields.question", where,
                fix="Every row needs its stem and options: fix the row or drop it")
    lines = body.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    start = len(lines)
    while start > 0 and _OPTION_LINE.match(lines[start - 1]):
        start -= 1
    found = [m for m in (_OPTION_LINE.match(line) for line in lines[start:]) if m]
    letters = [m.group(1) for m in found]
    if not letters or letters != list(LETTERS[:len(letters)]):
        raise UserError("question does not end in a run of option lines `A. text`, `B. text` ... after its stem "
                        f"(found {', '.join(letters) or 'none'}). Fix the row or drop it", file=where,
                        field="dataset.fields.question")
    stem = "\n".join(lines[:start]).strip()
    return stem, {m.group(1): option_text(m.group(2).strip(), m.group(1), where) for m in found}


def json_options(value: object, column: str, where: str) -> dict[str, object]:
    """AfriMed-QA's `answer_options`: JSON text of an object keyed `option1` ... `option5`."""
    if not isinstance(value, str):
        raise UserError(f"options column {column!r} is {_kind(value)}, not JSON text", file=where,
                        field="dataset.fields.options")
    try:
        decoded = json.loads(value)
    except ValueError:
        raise UserError(f"options column {column!r} is not valid JSON ({value[:60]!r}). Fix the row or drop it",
                        file=where, field="dataset.fields.options") from None
    if not isinstance(decoded, dict):
        raise UserError(f"options column {column!r} holds {type(decoded).__name__}, not an object of options",
                        file=where, field="dataset.fields.options")
    return decoded


def keyed(value: dict[str, object], where: str) -> tuple[dict[str, str], dict[str, str]]:
    """Options keyed other than by letter, lettered A, B ... in their order; trailing empty ones
    (a four-option item of a five-slot layout, empty or `N/A` as AfriMed-QA's writers filled the slot,
    which its publisher's own loader drops too) dropped. Returns (letter -> text, key -> letter)."""
    pairs = list(value.items())
    while pairs and (pairs[-1][1] is None or (isinstance(pairs[-1][1], str)
                                              and pairs[-1][1].strip().upper() in ("", "N/A"))):
        pairs.pop()
    if len(pairs) > len(LETTERS):
        raise UserError(f"has {len(pairs)} options, more than letters", file=where, field="dataset.fields.options")
    opts = {LETTERS[i]: option_text(v, LETTERS[i], where) for i, (_, v) in enumerate(pairs)}
    return opts, {str(k): LETTERS[i] for i, (k, _) in enumerate(pairs)}


def separated(value: object, separator: str | None) -> object:
    """A string answer listing several golds (`A,C`), split and stripped; anything else as it is."""
    if separator is None or not isinstance(value, str):
        return value
    return [part.strip() for part in value.split(separator) if part.strip()]


def by_key(value: object, keys: dict[str, str], where: str) -> list[str]:
    """Golds that name options by their stored key (AfriMed-QA's `option3`), as letters."""
    out = []
    for v in values(value):
        if not isinstance(v, str) or v.strip() not in keys:
            raise UserError(f"answer {v!r} is not one of the options' keys ({', '.join(keys)})", file=where,
                            field=_ANSWER)
        out.append(keys[v.strip()])
    return out
