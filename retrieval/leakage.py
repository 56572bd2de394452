"""Leakage detectors for retrieved evidence (CLEAR section 3.4, Tables 6-7).

Two kinds of leakage are kept apart, as in the paper:

- *direct benchmark-item leakage*: the retrieved text contains the benchmark item itself. Three
  detectors look for it: a long contiguous match with the question stem (`stem_match`), a high
  share of the stem's word 8-grams (`ngram_overlap`, which survives small edits and reordering),
  and verbatim recovery of the answer options as a list (`option_recovery`) or of a long gold
  option text (`gold_text`);
- *upstream-source retrieval*: the retrieved document is the publication or case the item was
  built from (`upstream_source`), matched on PMID, PMC id, DOI, URL or exact title when the
  dataset carries provenance. It is expected behaviour of a good retriever and is reported
  separately.

Everything here is a pure function of strings and dicts: no I/O, no agent or runner imports. The
thresholds are deliberately conservative so that generic clinical boilerplate ("which of the
following is the most likely diagnosis", a passage naming one option) stays silent; each one is a
field of `Thresholds` and can be changed per audit.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "DIRECT",
    "UPSTREAM",
    "LeakHit",
    "QuestionProbe",
    "Thresholds",
    "audit_passage",
    "gold_text_recovery",
    "identifiers",
    "longest_common_substring",
    "ngram_overlap",
    "normalize",
    "option_recovery",
    "stem_match",
    "upstream_source_match",
]

DIRECT = ("stem_match", "ngram_overlap", "option_recovery", "gold_text")
"""Detectors whose hits count as direct benchmark-item leakage."""
UPSTREAM = ("upstream_source",)
"""Detectors whose hits count as upstream-source retrieval."""
DIRECT_KIND, UPSTREAM_KIND = "direct", "upstream"
"""A hit's kind: found in the passage itself, or only in the source document it came from."""

_NON_ALNUM = re.compile(r"[^0-9a-z]+")


@dataclass(frozen=True)
class Thresholds:
    """When each detector fires. Lengths are in characters of normalized text."""

    stem_min_chars: int = 80
    """A contiguous stem match this long fires whatever the stem's length."""
    stem_min_frac: float = 0.9
    """... or one covering this share of the stem (a short question copied whole) ..."""
    stem_floor_chars: int = 40
    """... but never one shorter than this (short stems would otherwise fire on boilerplate)."""
    ngram_n: int = 8
    """Word n-gram size for the overlap detector."""
    ngram_min_containment: float = 0.3
    """Share of the stem's n-grams found in the passage."""
    ngram_min_shared: int = 3
    """At least this many shared n-grams (one shared 8-gram is a stock phrase, not a copy)."""
    option_min_chars: int = 8
    """Options shorter than this (yes / no / maybe, single drug names) do not count as evidence
    of a recovered option list."""
    option_min_count: int = 3
    """Option-list recovery needs at least this many eligible options in the question ..."""
    option_min_frac: float = 1.0
    """... this share of them found verbatim ..."""
    option_window_slack: int = 30
    """... inside one window of sum(len(option)) + slack x options characters (a list, not a
    textbook paragraph that happens to mention each differential somewhere)."""
    gold_min_chars: int = 30
    """A gold option text this long, found verbatim, fires `gold_text`."""
    gold_min_words: int = 4
    title_min_chars: int = 20
    """Upstream title matches need a normalized title at least this long."""


@dataclass(frozen=True)
class LeakHit:
    """One detector firing on one passage."""

    detector: str
    """`stem_match`, `ngram_overlap`, `option_recovery`, `gold_text` or `upstream_source`."""
    score: float
    """The measured quantity (characters, containment, options found, ...)."""
    threshold: float
    """The value it had to reach."""
    detail: str
    """Human-readable evidence: the matched text or identifier."""
    kind: str = ""
    """`direct` or `upstream`; by default from the detector (see `audit_passage` for the exception)."""

    def __post_init__(self) -> None:
        if not self.kind:
            object.__setattr__(self, "kind", UPSTREAM_KIND if self.detector in UPSTREAM else DIRECT_KIND)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def normalize(text: str) -> str:
    """Case-folded, NFKC, punctuation to single spaces: formatting differences never hide a copy."""
    t = unicodedata.normalize("NFKC", text or "").casefold()
    return _NON_ALNUM.sub(" ", t).strip()


# -- contiguous stem match ---------------------------------------------------------------------


class _SuffixAutomaton:
    """Suffix automaton of one string: longest common substring with any other string in O(len)."""

    def __init__(self, s: str) -> None:
        self.next: list[dict[str, int]] = [{}]
        self.link: list[int] = [-1]
        self.length: list[int] = [0]
        last = 0
        for ch in s:
            cur = len(self.next)
            self.next.append({})
            self.length.append(self.length[last] + 1)
            self.link.append(0)
            p = last
            while p != -1 and ch not in self.next[p]:
                self.next[p][ch] = cur
                p = self.link[p]
            if p != -1:
                q = self.next[p][ch]
                if self.length[p] + 1 == self.length[q]:
                    self.link[cur] = q
                else:
                    clone = len(self.next)
                    self.next.append(dict(self.next[q]))
                    self.length.append(self.length[p] + 1)
                    self.link.append(self.link[q])
                    while p != -1 and self.next[p].get(ch) == q:
                        self.next[p][ch] = clone
                        p = self.link[p]
                    self.link[q] = clone
                    self.link[cur] = clone
            last = cur

    def lcs(self, t: str) -> tuple[int, int]:
        """(length, end index in t) of the longest substring of t that occurs in the automaton's string."""
        v = length = best = best_end = 0
        for i, ch in enumerate(t):
            while v and ch not in self.next[v]:
                v = self.link[v]
                length = self.length[v]
            if ch in self.next[v]:
                v = self.next[v][ch]
                length += 1
            if length > best:
                best, best_end = length, i + 1
        return best, best_end


def longest_common_substring(a: str, b: str) -> str:
    """The longest common substring of two strings (as given; normalize first if wanted)."""
    if not a or not b:
        return ""
    n, end = _SuffixAutomaton(a).lcs(b)
    return b[end - n:end]


def stem_match(probe: QuestionProbe, passage_norm: str, th: Thresholds) -> LeakHit | None:
    n, end = probe.automaton.lcs(passage_norm)
    need = min(th.stem_min_chars, max(th.stem_floor_chars, math.ceil(th.stem_min_frac * len(probe.stem))))
    if probe.stem and n >= need:
        match = passage_norm[end - n:end]
        return LeakHit("stem_match", n, need, f"{n} contiguous characters of the stem: {_clip(match)}")
    return None


# -- n-gram overlap ----------------------------------------------------------------------------


def _ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def ngram_overlap(a_norm: str, b_norm: str, n: int = 8) -> tuple[int, float, float]:
    """(shared n-grams, containment of a in b, Jaccard) over word n-grams of normalized texts."""
    ga, gb = _ngrams(a_norm.split(), n), _ngrams(b_norm.split(), n)
    shared = len(ga & gb)
    containment = shared / len(ga) if ga else 0.0
    union = len(ga | gb)
    return shared, containment, (shared / union if union else 0.0)


def _ngram_hit(probe: QuestionProbe, passage_norm: str, th: Thresholds) -> LeakHit | None:
    if not probe.grams:
        return None
    gp = _ngrams(passage_norm.split(), th.ngram_n)
    shared = len(probe.grams & gp)
    containment = shared / len(probe.grams)
    if shared >= th.ngram_min_shared and containment >= th.ngram_min_containment:
        return LeakHit("ngram_overlap", round(containment, 4), th.ngram_min_containment,
                       f"{shared}/{len(probe.grams)} of the stem's {th.ngram_n}-grams appear in the passage")
    return None


# -- options and gold text ---------------------------------------------------------------------


def _find_all(hay: str, needle: str) -> list[int]:
    """Start offsets of `needle` in `hay` on word boundaries (both are normalized)."""
    out, start = [], 0
    padded_hay, padded = f" {hay} ", f" {needle} "
    while (i := padded_hay.find(padded, start)) != -1:
        out.append(i)
        start = i + 1
    return out


def option_recovery(options: Mapping[str, str], passage_norm: str, th: Thresholds) -> LeakHit | None:
    """All (eligible) options verbatim and close together: the option list itself was retrieved."""
    eligible = {k: normalize(v) for k, v in options.items()}
    eligible = {k: v for k, v in eligible.items() if len(v) >= th.option_min_chars}
    if len(eligible) < th.option_min_count:
        return None
    need = max(th.option_min_count, math.ceil(th.option_min_frac * len(eligible)))
    positions = {k: _find_all(passage_norm, v) for k, v in eligible.items()}
    found = {k: p for k, p in positions.items() if p}
    if len(found) < need:
        return None
    window = sum(len(v) for v in eligible.values()) + th.option_window_slack * len(eligible)
    # Smallest window holding one occurrence each of `need` distinct options (sweep over offsets).
    events = sorted((pos, k) for k, ps in found.items() for pos in ps)
    counts: dict[str, int] = {}
    lo = 0
    best: int | None = None
    for pos, k in events:
        counts[k] = counts.get(k, 0) + 1
        while len(counts) >= need:
            end = max(p + len(eligible[q]) for p, q in events[lo:] if p <= pos)
            span = end - events[lo][0]
            best = span if best is None else min(best, span)
            first = events[lo][1]
            counts[first] -= 1
            if not counts[first]:
                del counts[first]
            lo += 1
    if best is not None and best <= window:
        return LeakHit("option_recovery", len(found), need,
                       f"options {', '.join(sorted(found))} verbatim within {best} characters")
    return None


def gold_text_recovery(options: Mapping[str, str], gold: Iterable[str], passage_norm: str,
                       th: Thresholds) -> LeakHit | None:
    """A long gold option text (a sentence, not a one-word diagnosis) found verbatim."""
    for letter in gold:
        text = normalize(options.get(letter, ""))
        if len(text) >= th.gold_min_chars and len(text.split()) >= th.gold_min_words and _find_all(passage_norm, text):
            return LeakHit("gold_text", len(text), th.gold_min_chars, f"gold option {letter}: {_clip(text)}")
    return None


# -- upstream source ---------------------------------------------------------------------------

_PMID = [re.compile(r"\bpmid\s*[:_ ]?\s*(\d{1,9})\b", re.I),
         re.compile(r"pubmed\.ncbi\.nlm\.nih\.gov/(\d{1,9})\b", re.I),
         re.compile(r"ncbi\.nlm\.nih\.gov/pubmed/(\d{1,9})\b", re.I),
         re.compile(r"\bpubmed\s*[:_/]\s*(\d{1,9})\b", re.I)]
_PMC = re.compile(r"\b(pmc\d{3,10})\b", re.I)
_DOI = re.compile(r"\b(10\.\d{4,9}/[^\s\"<>]+)", re.I)


def _norm_url(url: str) -> str:
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return ""
    host = (parts.hostname or "").lower().removeprefix("www.")
    if not host:
        return ""
    path = parts.path.rstrip("/")
    return f"{host}{path}" + (f"?{parts.query}" if parts.query else "")


def identifiers(record: Mapping[str, object]) -> dict[str, set[str]]:
    """PMIDs, PMC ids, DOIs, URLs and titles named by a provenance record or an evidence item."""
    out: dict[str, set[str]] = {"pmid": set(), "pmcid": set(), "doi": set(), "url": set(), "title": set()}
    for key in ("pmid", "pubmed_id"):
        for v in _as_list(record.get(key)):
            if str(v).strip().isdigit():
                out["pmid"].add(str(int(str(v).strip())))
    for v in _as_list(record.get("pmcid")):
        out["pmcid"].add(str(v).strip().lower())
    for v in _as_list(record.get("doi")):
        out["doi"].add(str(v).strip().lower().rstrip("."))
    texts = [str(v) for key in ("doc_id", "id", "url", "source_url") for v in _as_list(record.get(key))]
    for text in texts:
        for rx in _PMID:
            out["pmid"].update(str(int(m)) for m in rx.findall(text))
        out["pmcid"].update(m.lower() for m in _PMC.findall(text))
        out["doi"].update(m.lower().rstrip(".") for m in _DOI.findall(text))
    for key in ("url", "source_url"):
        for v in _as_list(record.get(key)):
            if (u := _norm_url(str(v))):
                out["url"].add(u)
    for v in _as_list(record.get("title")):
        if (t := normalize(str(v))):
            out["title"].add(t)
    return out


def upstream_source_match(provenance: Mapping[str, object] | None, evidence: Mapping[str, object],
                          th: Thresholds) -> LeakHit | None:
    """The evidence is the item's source document: same PMID / PMC id / DOI / URL / exact title."""
    if not provenance:
        return None
    src, ev = identifiers(provenance), identifiers(evidence)
    for key in ("pmid", "pmcid", "doi", "url"):
        common = src[key] & ev[key]
        if common:
            return LeakHit("upstream_source", 1.0, 1.0, f"same {key}: {sorted(common)[0]}")
    titles = {t for t in src["title"] & ev["title"] if len(t) >= th.title_min_chars}
    if titles:
        return LeakHit("upstream_source", 1.0, 1.0, f"same title: {_clip(sorted(titles)[0])}")
    return None


# -- one question against many passages --------------------------------------------------------


@dataclass
class QuestionProbe:
    """A question prepared once (normalized stem, suffix automaton, n-grams) for many passages."""

    text: str
    options: dict[str, str]
    gold: tuple[str, ...] = ()
    provenance: dict[str, object] | None = None
    thresholds: Thresholds = field(default_factory=Thresholds)

    def __post_init__(self) -> None:
        self.stem = normalize(self.text)
        self.automaton = _SuffixAutomaton(self.stem)
        self.grams = _ngrams(self.stem.split(), self.thresholds.ngram_n)

    @classmethod
    def from_question(cls, question: Mapping[str, Any], provenance: Mapping[str, Any] | None = None,
                      thresholds: Thresholds | None = None) -> QuestionProbe:
        """From a transcript's `question` dict (text, options, gold)."""
        return cls(text=str(question.get("text", "")), options=dict(question.get("options") or {}),
                   gold=tuple(question.get("gold") or ()), provenance=dict(provenance) if provenance else None,
                   thresholds=thresholds or Thresholds())

    def check(self, evidence: Mapping[str, object]) -> list[LeakHit]:
        return audit_passage(self, evidence)


def audit_passage(probe: QuestionProbe, evidence: Mapping[str, object]) -> list[LeakHit]:
    """Every detector on one evidence item (a dict with text/content, title, doc_id, url ...).

    When the passage is the item's identified source document and neither the options nor the
    gold text were recovered, its stem and n-gram matches count as upstream, not direct: a
    PubMedQA question *is* its abstract's title, and CLEAR's audit (Tables 6-7) reports such
    retrievals as upstream-source retrieval, not as the benchmark item itself.
    """
    th = probe.thresholds
    body = " ".join(str(evidence.get(k) or "") for k in ("title", "text", "content", "snippet"))
    passage = normalize(body)
    hits = [stem_match(probe, passage, th), _ngram_hit(probe, passage, th),
            option_recovery(probe.options, passage, th),
            gold_text_recovery(probe.options, probe.gold, passage, th),
            upstream_source_match(probe.provenance, evidence, th)]
    found = [h for h in hits if h is not None]
    names = {h.detector for h in found}
    if "upstream_source" in names and not names & {"option_recovery", "gold_text"}:
        found = [h if h.kind == UPSTREAM_KIND else
                 replace(h, kind=UPSTREAM_KIND, detail=f"{h.detail} (in the source document)") for h in found]
    return found


def _as_list(v: object) -> list[object]:
    if v is None or v == "":
        return []
    return list(v) if isinstance(v, list | tuple | set) else [v]


def _clip(s: str, n: int = 120) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."
