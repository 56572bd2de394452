"""A reply is scanned for fences and braces only when it is not a valid object as it stands, and
parses to the same result (or the same reason) as when every candidate was gathered first."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from medpanel.agents.model import structured
from medpanel.agents.model.structured import answer_model, parse_reply


def every_candidate_first(text: str, model: type[BaseModel]) -> tuple[Any, str | None]:
    """parse_reply as it was: every candidate gathered (fences, the first balanced braces) before any
    is tried."""
    candidates = [text.strip()]
    candidates += [m.strip() for m in re.findall(r"```(?:json)?\s*(.*?)```", text, re.S)]
    start = text.find("{")
    if start >= 0:
        depth = 0
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    candidates.append(text[start : i + 1])
                    break
    reason = "no JSON object found"
    for cand in candidates:
        if not cand.startswith("{"):
            continue
        try:
            return model.model_validate_json(cand), None
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(x) for x in first["loc"])
            reason = f"{loc or 'reply'}: {first['msg']}" if first["type"] != "json_invalid" else "invalid JSON"
    return None, reason


MODEL = answer_model(["A", "B", "C", "D"], reasoning=True)
TEXTS = [
    '{"reasoning": "short", "answer": "B"}',
    '  \n{"reasoning": "padded", "answer": "C"}\n ',
    'Sure! ```json\n{"reasoning": "fenced", "answer": "A"}\n``` hope it helps',
    'I think {"reasoning": "in prose {with braces}", "answer": "D"} is it',
    '{"reasoning": "bad letter", "answer": "E"}',
    '{"reasoning": "truncated", "answ',
    'no object at all',
    '',
    '```\n{"answer": "A"}\n``` and ```json {"reasoning": "second", "answer": "B"}```',
    '{"reasoning": "x"} then {"reasoning": "y", "answer": "A"}',
    '}{ "answer": "A" }',
    '{"reasoning": "nested {{}}", "answer": "B"} trailing }',
]


@pytest.mark.parametrize("text", TEXTS)
def test_the_same_reply_or_reason_as_every_candidate_first(text: str) -> None:
    got, reason = parse_reply(text, MODEL)
    want, want_reason = every_candidate_first(text, MODEL)
    assert (got.model_dump() if got else None, reason) == (want.model_dump() if want else None, want_reason)


def test_random_replies_parse_as_before() -> None:
    rng = random.Random(7)
    pieces = ["{", "}", "```", "```json", '"answer": "A"', '"answer": "Q"', '"reasoning": "r"', ", ", " text ",
              "\n", ":", '"', "[", "]"]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        got, reason = parse_reply(text, MODEL)
        want, want_reason = every_candidate_first(text, MODEL)
        assert (got.model_dump() if got else None, reason) == (want.model_dump() if want else None, want_reason), text


class CountingFence:
    def __init__(self) -> None:
        self.calls = 0
        self.pattern = re.compile(r"```(?:json)?\s*(.*?)```", re.S)

    def findall(self, text: str) -> list[str]:
        self.calls += 1
        return self.pattern.findall(text)


def test_a_valid_reply_is_not_scanned_for_fences_or_braces(monkeypatch: pytest.MonkeyPatch) -> None:
    fence = CountingFence()
    monkeypatch.setattr(structured, "_FENCE", fence)
    long = "why " * 2000  # a long reasoning: scanning it character by character cost more than parsing it
    parsed, _ = parse_reply(f'{{"reasoning": "{long}{{}}", "answer": "B"}}', MODEL)
    assert parsed is not None and parsed.answer == "B"
    assert fence.calls == 0
    parsed, _ = parse_reply('Here: ```json\n{"reasoning": "r", "answer": "C"}\n```', MODEL)
    assert parsed is not None and parsed.answer == "C" and fence.calls == 1
