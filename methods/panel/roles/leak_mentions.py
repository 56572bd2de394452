"""Where a text names one of a question's options: by its letter, its text, or a distinctive part of
its text (the answer screen's first half; `leak_screen.py` judges what each mention says).

A distinctive part is a run of the option's words that no other option shares and that is more than
a generic word: "graves" of "Graves disease", "silent thyroiditis" of "Painless (silent)
thyroiditis", "cipro" of "Oral ciprofloxacin (Cipro)", "LAD" of "Left anterior descending artery",
"E. coli" of "Escherichia coli". Letters are capitals on their own: the article "A", the pronoun "I",
"vitamin C", "E. coli", "D-dimer", "anti-A" and "option C's" are no letters. Texts of one or two
characters (blood groups O / A / B / AB) are matched with their case, so "a" is never the group A.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from medpanel.methods.panel.roles.leak_words import (
    FUNCTION,
    GENERIC,
    HEADS,
    LETTER_FOLLOWERS,
    NAME_WORDS,
    PRONOUN_FOLLOWERS,
    UNIGRAM_STOP,
)

_TOKEN = re.compile(r"\d+(?:[.,]\d+)*%?|[^\W\d_]+\d*|\d+")
_SPLIT = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])|\n+")
_JOIN = re.compile(r"[\s\-‐'’().]*")
"""What may stand between two words of one option's text (spaces, hyphens, apostrophes, brackets)."""
_MERGE = re.compile(r"[\s()\[\]:.\-–—]*")
YES_NO = frozenset({"yes", "no", "maybe", "true", "false"})

Token = tuple[str, int, int]
Span = tuple[int, int, str, "Kind"]
Kind = Literal["letter", "value", "text"]


@dataclass(frozen=True)
class Phrase:
    """One way of naming an option: its words (lower case), and whether case must match too."""

    words: tuple[str, ...]
    exact: tuple[str, ...] | None = None
    """The words as written, for short texts and acronyms (the group "A" is not the article "a")."""


@dataclass(frozen=True)
class Mention:
    """A place in a sentence that names an option (or several, when two namings touch)."""

    start: int
    end: int
    text: str
    keys: frozenset[str]
    kind: Kind
    """`letter`; `value`: a number, yes/no/maybe or a one- or two-character text, which other words
    of a sentence use too ("no placebo arm", "5 years"); `text`: the rest."""


def stem(word: str) -> str:
    """A word as the screen compares it: lower case, a plural's "s" dropped ("neutrophils", "statins";
    not "psoriasis", "aureus", "abscess")."""
    w = word.lower()
    return w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")) else w


def tokens(text: str) -> list[Token]:
    return [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def sentences(text: str) -> list[str]:
    """Sentences as the screen judges (and redacts) them; "E. coli" and "vitamin C." do not end one."""
    return [s for s in _SPLIT.split(text) if s.strip()]


_GENERIC = frozenset(stem(w) for w in GENERIC)
_STOP = frozenset(stem(w) for w in UNIGRAM_STOP)
_HEADS = frozenset(stem(w) for w in HEADS)


def _contains(seq: tuple[str, ...], sub: tuple[str, ...]) -> bool:
    n = len(sub)
    return any(seq[i:i + n] == sub for i in range(len(seq) - n + 1))


def _distinctive(words: tuple[str, ...], others: list[tuple[str, ...]]) -> Iterator[tuple[str, ...]]:
    """The runs of an option's words no other option shares and that are more than generic words."""
    for i in range(len(words)):
        for j in range(i + 1, len(words) + 1):
            run = words[i:j]
            if run[0] in FUNCTION or run[-1] in FUNCTION or any(_contains(o, run) for o in others):
                continue
            if len(run) == 1:
                w = run[0]
                if w in _GENERIC or w in _STOP or (len(w) < 4 and not any(c.isdigit() for c in w)):
                    continue
            elif all(w in FUNCTION or w in _GENERIC for w in run):
                continue
            yield run


def _acronyms(raw: list[str]) -> Iterator[str]:
    """"LAD" and "LADA" of "Left anterior descending artery", "RCA" of "Right coronary artery"."""
    content = [w for w in raw if w.lower() not in FUNCTION and w.isalpha()]
    for ws in (content, content[:-1] if content and stem(content[-1]) in _GENERIC else []):
        if len(ws) >= 3:
            yield "".join(w[0].upper() for w in ws)


def _phrases(options: tuple[tuple[str, str], ...]) -> dict[str, list[Phrase]]:
    raw = {k: [t for t, _, _ in tokens(v)] for k, v in options}
    words = {k: tuple(stem(w) for w in ws) for k, ws in raw.items()}
    out: dict[str, list[Phrase]] = {}
    for key, ws in words.items():
        others = [o for k, o in words.items() if k != key]
        if not ws:
            out[key] = []
            continue
        short = len("".join(ws)) <= 2
        # A capital's case is kept (the group "A" is not the article "a"); "no" is "No" at a sentence's start.
        found = [Phrase(ws, tuple(raw[key]) if short and not "".join(raw[key]).islower() else None)]
        if not short:
            found += [Phrase(run) for run in _distinctive(ws, others) if run != ws]
            found += [Phrase((a.lower(),), (a,)) for a in _acronyms(raw[key])
                      if not any(_contains(o, (a.lower(),)) for o in others)]
            if len(ws) >= 2 and ws[0].isalpha() and len(ws[0]) >= 3:  # "E. coli" for Escherichia coli
                abbrev = (ws[0][0], ws[1])
                if not any(len(o) >= 2 and (o[0][:1], o[1]) == abbrev for o in others):
                    found.append(Phrase(abbrev))
        out[key] = sorted(found, key=lambda p: -len(p.words))
    return out


def _value(words: tuple[str, ...]) -> bool:
    return len("".join(words)) <= 2 or words[0] in YES_NO or all(not w.isalpha() for w in words)


class OptionSet:
    """An option set's ways of being named, built once per set (`option_set` caches them)."""

    def __init__(self, options: tuple[tuple[str, str], ...]) -> None:
        self.letters = frozenset(k for k, _ in options)
        self.phrases = _phrases(options)
        self.words = {k: frozenset(w for p in ps for w in p.words) for k, ps in self.phrases.items()}
        self.values = frozenset(k for k, ps in self.phrases.items() if ps and _value(ps[0].words))

    def _letter_at(self, text: str, tok: str, start: int, end: int) -> bool:
        if tok not in self.letters:
            return False
        before, after = text[:start], text[end:]
        prev = re.search(r"(\w+)\W*$", before)
        if re.search(r"[\-‐'’]$", before) or (prev and prev.group(1).lower() in NAME_WORDS and
                                               re.fullmatch(r"\s*", before[prev.end(1):])):
            return False
        if re.match(r"[\-‐'’]\w|\.\s*[a-z]", after):  # "D-dimer", "C's", "E. coli"
            return False
        if tok in ("A", "I"):  # the article and the pronoun, unless a verdict's verb follows
            nxt = re.match(r"\s+([a-z]+)", after)
            return nxt is None or nxt.group(1) in (LETTER_FOLLOWERS if tok == "A" else PRONOUN_FOLLOWERS)
        return True

    def mentions(self, text: str) -> list[Mention]:
        toks = tokens(text)
        low = [stem(t) for t, _, _ in toks]
        spans: list[Span] = []
        for i, (tok, start, end) in enumerate(toks):
            if self._letter_at(text, tok, start, end):
                bracketed = start > 0 and end < len(text) and text[start - 1] in "([" and text[end] in ")]"
                spans.append((start - 1, end + 1, tok, "letter") if bracketed else (start, end, tok, "letter"))
            for key, phrases in self.phrases.items():
                for p in phrases:
                    j = i + len(p.words)
                    if tuple(low[i:j]) != p.words or not _joined(text, toks, i, j):
                        continue
                    if p.exact is not None and tuple(t for t, _, _ in toks[i:j]) != p.exact:
                        continue
                    if re.match(r"[\-‐]\w", text[toks[j - 1][2]:]) and len("".join(p.words)) <= 3:
                        continue  # "5-year", "O-negative"
                    a, b = self._extend(text, toks, low, i, j, key)
                    spans.append((toks[a][1], toks[b - 1][2], key, "value" if key in self.values else "text"))
                    break
        return _merged(text, _outermost(spans))

    def _extend(self, text: str, toks: list[Token], low: list[str], i: int, j: int, key: str) -> tuple[int, int]:
        """Widen a mention over the option's own words and a generic head: "subacute thyroiditis",
        "a right coronary artery occlusion", "Vitamin B12 deficiency"."""
        own = self.words[key]
        while i > 0 and low[i - 1] in own and low[i - 1] not in FUNCTION and _joined(text, toks, i - 1, i + 1):
            i -= 1
        while j < len(toks) and _joined(text, toks, j - 1, j + 1):
            if (low[j] in own and low[j] not in FUNCTION) or low[j] in _HEADS:
                j += 1
                continue
            k = j  # "the colleague to the board": function words bridge to the option's next word
            while k < len(toks) and low[k] in FUNCTION and _joined(text, toks, k - 1, k + 1):
                k += 1
            if j < k < len(toks) and low[k] in own and low[k] not in FUNCTION and _joined(text, toks, k - 1, k + 1):
                j = k + 1
                continue
            break
        return i, j


def _joined(text: str, toks: list[Token], i: int, j: int) -> bool:
    return all(_JOIN.fullmatch(text[toks[k][2]:toks[k + 1][1]]) for k in range(i, j - 1))


def _outermost(spans: list[Span]) -> list[Span]:
    """An option's text inside a longer option's text names only the longer one: "ceftriaxone plus
    azithromycin" is one option, not a differential of two."""
    texts = [s for s in spans if s[3] != "letter"]
    return [s for s in spans if s[3] == "letter" or not any(
        o[2] != s[2] and o[0] <= s[0] and s[1] <= o[1] and (o[0], o[1]) != (s[0], s[1]) for o in texts)]


def _merged(text: str, spans: list[Span]) -> list[Mention]:
    """Overlapping or adjacent spans as one mention: "(C) MRI" is one."""
    out: list[tuple[int, int, set[str], Kind]] = []
    for start, end, key, kind in sorted(set(spans)):
        if out and (start <= out[-1][1] or _MERGE.fullmatch(text[out[-1][1]:start])):
            s, e, keys, k = out[-1]
            out[-1] = (s, max(e, end), keys | {key}, "text" if "text" in (k, kind) else k)
        else:
            out.append((start, end, {key}, kind))
    found = []
    for start, end, keys, kind in out:
        # "Thiamine (vitamin B1)": the bracket the option's text opened closes in it
        while text[start:end].count("(") > text[start:end].count(")") and text[end:end + 1] == ")":
            end += 1
        found.append(Mention(start, end, text[start:end], frozenset(keys), kind))
    return found


@functools.lru_cache(maxsize=256)
def option_set(options: tuple[tuple[str, str], ...]) -> OptionSet:
    return OptionSet(options)
