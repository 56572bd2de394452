"""The MCQ format gate (paper eq. 17-18): the decision's answer as valid option letters.

It never changes the medical conclusion and never picks a letter: it only checks that every
letter is one of the question's options, removes duplicates, orders them, and for a
single-answer question requires exactly one. Anything else is invalid (scored wrong, counted).
Multi-answer questions (NEJM-QA style) may return several letters; how they are scored is the
dataset's `scoring` (`exact_set`, the paper, or `any_of`, the authors' code).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_SPLIT = re.compile(r"\s*(?:,|;|/|\band\b|&|\+|\s)\s*", re.I)


@dataclass
class GateResult:
    letters: tuple[str, ...]
    valid: bool
    reason: str = ""

    def record(self) -> dict[str, Any]:
        return {"letters": list(self.letters), "valid": self.valid, "reason": self.reason}


def format_gate(answer: Iterable[str] | str | None, options: dict[str, str], multi: bool) -> GateResult:
    if answer is None:
        return GateResult((), False, "no adjudicated answer")
    parts = _SPLIT.split(answer) if isinstance(answer, str) else [str(a) for a in answer]
    letters: list[str] = []
    for part in parts:
        token = part.strip().strip("()[]{}.:'\"").strip()
        if not token:
            continue
        token = token.upper() if len(token) == 1 else token
        if token not in options:
            return GateResult((), False, f"{part!r} is not one of the options {', '.join(options)}")
        if token not in letters:
            letters.append(token)
    if not letters:
        return GateResult((), False, "no option letter in the answer")
    if not multi and len(letters) > 1:
        return GateResult((), False, f"{len(letters)} letters for a single-answer question")
    return GateResult(tuple(sorted(letters)), True)
