"""The answer screen: does a text name one of a question's options as the answer?

The Challenger names a reasoning need and must never hand the team the answer (seed paper: "it does
not directly provide the answer"), so its challenge is screened before anyone reads it, one sentence
at a time. `leak_mentions.py` finds where a sentence names an option (its letter, its text, a
distinctive part of its text); this module judges each naming.

A sentence leaks when it puts an option in a verdict's place, even inside a question:

- what the stem asks for: "the most likely diagnosis is X", "the affected vessel is the X", "this
  is X", "NNT = 20"; an answer cue: "the answer is C", "choose D", "switch to B";
- the subject of a verdict: "X is the best fit", "X explains everything", "G is correct";
- an order or a recommendation: "start X", "she should receive X", "why not just start X?";
- what a finding proves: "the low uptake points to X", "most consistent with X";
- alone: "Clearly C.", "E.", "Median nerve.", "Yes, the trial supports it.".

Those phrasings are an open class ("settles it: X", "we're looking at X", "put her on X"), so a
statement (a sentence that is not a question) that names an option leaks too, unless the naming is
one a critique makes without choosing: negated or eliminated ("nobody excluded X", "X cannot explain
the wrist drop"), conditional ("if the diagnosis is X"), the team's own position ("the team settled
on X"), a differential (two or more options named), or an attribute of the option ("the ECG finding",
"X's side effects"). A question passes unless it holds a verdict's phrasing: asking is what a
targeted challenge does ("which finding separates X from Y?").
"""

from __future__ import annotations

import re

from medpanel.methods.panel.roles.leak_mentions import YES_NO, Mention, OptionSet, option_set, sentences
from medpanel.methods.panel.roles.leak_words import (
    ACT,
    ADV,
    ATTRIBUTE,
    COPULA,
    CUE,
    END,
    FILLER_AFTER,
    FILLER_BEFORE,
    INFER,
    MODAL,
    NEGATION,
    PRE,
    REASON,
    SKIP_VERB,
    STANDALONE,
    SUBJECT_START,
    VERDICT_AFTER,
)

__all__ = ["leaks", "sentences"]

_QUESTION = re.compile(r"\?[\s\"')\]]*$")
_SEGMENT = re.compile(r";|—|–|\s-\s|,\s+(?:so|but|yet|and)\s+", re.I)
"""What separates a statement from a question in one sentence ("It's X, so why ...?")."""
_CLAUSE = re.compile(r"[,;:—–]|\s-\s|\b(?:but|yet|though|although|whereas|while)\b", re.I)
_CONDITIONAL = re.compile(r"\b(?:if|whether|unless|assuming|suppose|supposing|why|how|what|which|when)\b", re.I)
_ASIDE = re.compile(r"\b(?:if|whether|unless|assuming|suppose|supposing)\b"
                    r"|\b(?:before|after|when|once|until)\s+(?:\S+\s+){0,3}$", re.I)
"""A condition, or a time the option sets ("before starting X"): no verdict on it."""
_TEAM = re.compile(r"\b(?:team|panel|generalist|specialists?|colleagues?|they|their|you|your)\b", re.I)
_THIRD_PERSON_TEAM = re.compile(r"\b(?:team|panel|generalist|specialists?|colleagues?|they|their)\b", re.I)
_EVALUATIVE = re.compile(r"\b(?:best|most|right|correct|appropriate|likely|preferred|better|should|must|would)\b",
                         re.I)
_INDICATIVE = re.compile(rf"(?:\b(?:is|are|was|were|remains)|['’]s)\s+{PRE}$", re.I)
_NEGATED = re.compile(r"(?:\bnot|\bnever|n['’]t|\bhardly|\bno\s+longer)\s+(?:\w+\s+){0,2}$", re.I)

_R_COPULA = re.compile(rf"(?:{COPULA})\s+{PRE}$", re.I)
_R_CUE = re.compile(rf"(?:{CUE})\s*{PRE}$", re.I)
_R_ACT = re.compile(rf"(?:^|[,:(]|\b(?:so|then|just|simply|now|please|instead|rather|and|first|i\s+would|i['’]d|"
                    rf"i\s+will|we\s+should|we\s+must|better\s+to|best\s+to|time\s+to)\b)\s*(?:{ACT})\s+"
                    rf"(?:(?:her|him|them|the\s+patient|this\s+patient|it)\s+)?(?:(?:on|with|to|for)\s+)?{PRE}$",
                    re.I)
_R_MODAL = re.compile(rf"\b(?:{MODAL})\s+(?:(?:have|be)\s+)?(?:(?!(?:{SKIP_VERB})\b)[a-z]+\s+)?"
                      rf"(?:(?:her|him|them|the\s+patient|it)\s+)?(?:(?:on|with|to|for)\s+)?{PRE}$", re.I)
_R_NEEDS = re.compile(rf"\b(?:needs|need|requires|deserves)\s+{PRE}$", re.I)
_R_INFER = re.compile(rf"(?:{INFER})\s+{PRE}$", re.I)
_R_LEADING = re.compile(rf"(?:\b(?:why\s+not|how\s+about|what\s+about)\s+(?:{ADV}\s+)*(?:(?:{ACT})\s+)?"
                        rf"(?:(?:her|him|them|the\s+patient|it)\s+)?(?:(?:on|with|to|for)\s+)?"
                        rf"|\b(?:shouldn['’]t|should\s+not|wouldn['’]t|mustn['’]t)\s+(?:she|he|they|we|you|the\s+"
                        rf"patient|the\s+team)\s+(?:[a-z]+\s+)?(?:(?:on|with|to|for)\s+)?"
                        rf"|\b(?:isn['’]t|is\s+it\s+not|wasn['’]t)\s+(?:this|it|that)\s+){PRE}$", re.I)
_R_SUBJECT = re.compile(rf"(?:^|,)\s*(?:{SUBJECT_START})?{PRE}(?:[a-z]+ing\s+(?:(?:the|a|an|her|him|them)\s+)?)?"
                        rf"{PRE}$", re.I)
_R_VERDICT = re.compile(VERDICT_AFTER, re.I)
_R_END = re.compile(END, re.I)
_R_BARE_BEFORE = re.compile(rf"^\W*(?:(?:{FILLER_BEFORE})\W*)*{PRE}$", re.I)
_R_BARE_AFTER = re.compile(rf"^\W*(?:(?:{FILLER_AFTER})\W*)*$|^\s*[,—–-]\s*(?:{REASON})\b", re.I)
_R_NEGATION = re.compile(NEGATION, re.I)
_R_ATTRIBUTE = re.compile(ATTRIBUTE, re.I)
_R_STANDALONE = re.compile(STANDALONE, re.I)
_R_LABEL = re.compile(r"\b(?:option|choice|answer|letter|group|type)\s*\(?$", re.I)


def _verdict_before(clause: str, question: bool) -> bool:
    """What precedes a mention makes it the answer: a copula, a cue, an order, an inference."""
    if _R_CUE.search(clause) or _R_LEADING.search(clause):
        return not _team_position(clause)
    if question:
        return False
    conditional = bool(_CONDITIONAL.search(clause))
    if _R_COPULA.search(clause):
        return not conditional and not _team_position(clause)
    if _R_ACT.search(clause) or _R_MODAL.search(clause) or _R_NEEDS.search(clause):
        return not conditional or bool(re.match(r"\s*(?:when|then)\b", clause, re.I))
    m = _R_INFER.search(clause)
    return m is not None and not conditional and not _NEGATED.search(clause[:m.start()])


def _team_position(clause: str) -> bool:
    """"The team's answer is B": the team's own position restated, not a verdict (unless it says what
    the team should have chosen)."""
    return bool(_TEAM.search(clause)) and bool(_INDICATIVE.search(clause)) and not _EVALUATIVE.search(clause)


def _segment_is_question(sentence: str, m: Mention) -> bool:
    starts = [0] + [x.end() for x in _SEGMENT.finditer(sentence) if x.end() <= m.start]
    ends = [x.start() for x in _SEGMENT.finditer(sentence) if x.start() >= m.end] + [len(sentence)]
    return bool(_QUESTION.search(sentence[max(starts):min(ends)]))


def _verdict(sentence: str, m: Mention) -> bool:
    """The mention stands where a verdict puts its answer."""
    before, after = sentence[:m.start], sentence[m.end:]
    question = _segment_is_question(sentence, m)
    clause = re.split(r"[;—–]|\s-\s", before)[-1]
    if _R_BARE_BEFORE.search(before) and _R_BARE_AFTER.search(after):
        return True
    if not question and before.strip(" \"'(") == "" and m.text.lower() in YES_NO and re.match(r"\s*[,;:—–]", after):
        return True  # "Yes, the trial supports it."
    if _verdict_before(clause, question) and _R_END.match(after):
        return True
    return (not question and bool(_R_VERDICT.match(after)) and bool(_R_SUBJECT.search(clause))
            and not _CONDITIONAL.search(clause))


def _named(sentence: str, m: Mention) -> bool:
    """A statement names the option other than as a critique does (negated, conditional, the team's,
    an attribute)."""
    before, after = sentence[:m.start], sentence[m.end:]
    if m.kind != "text" and not (_R_STANDALONE.match(after) or _R_LABEL.search(before)):
        return False  # "no placebo arm", "5 years", "B cells": other words, not the option
    bounds = [x for x in _CLAUSE.finditer(sentence)]
    start = max([0] + [x.end() for x in bounds if x.end() <= m.start])
    end = min([len(sentence)] + [x.start() for x in bounds if x.start() >= m.end])
    own_before, own_after = sentence[start:m.start], sentence[m.end:end]
    if _R_NEGATION.search(own_before) or _R_NEGATION.search(own_after):
        return False
    if _ASIDE.search(own_before) or _THIRD_PERSON_TEAM.search(own_before):
        return False
    return not _R_ATTRIBUTE.match(after)


def _sentence_leaks(sentence: str, found: OptionSet) -> bool:
    mentions = found.mentions(sentence)
    if any(_verdict(sentence, m) for m in mentions):
        return True
    if _QUESTION.search(sentence) or len({k for m in mentions for k in m.keys}) > 1:
        return False  # a question, or a differential
    return any(_named(sentence, m) for m in mentions)


def leaks(text: str, options: dict[str, str]) -> bool:
    """Does any sentence of `text` name one of `options` as the answer?"""
    found = option_set(tuple(options.items()))
    return any(_sentence_leaks(s, found) for s in sentences(text))
