"""`redact` runs a pattern only over text that holds one of its words; that check never lets a
match through: every character a case-insensitive pattern takes for a word's letter folds to that
letter, and the result is the one running every pattern over the whole text gives."""

from __future__ import annotations

import json
import re
import sys

import pytest

from medpanel.agents import redact as redaction
from medpanel.agents.redact import MASK, folded, redact

KEY = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0"
TOKEN = "AbCdEf0123456789GhIjKl"


def _every_pattern(text: str) -> str:
    """What `redact` gave before it looked for the words: each pattern over the whole text."""
    for value in redaction._secrets():
        if value in text:
            text = text.replace(value, MASK)
    for _words, _any_case, pattern in redaction._PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    return text


def test_every_character_a_pattern_takes_for_a_words_letter_folds_to_that_letter() -> None:
    letters = {c for words, any_case, _ in redaction._PATTERNS if any_case for w in words for c in w if c.isalpha()}
    checks = {c: re.compile(f"(?i){c}") for c in letters}
    wrong = [(hex(cp), letter) for cp in range(sys.maxunicode + 1) if not 0xD800 <= cp <= 0xDFFF
             for letter, check in checks.items() if check.fullmatch(chr(cp)) and folded(chr(cp)) != letter]
    assert wrong == []


@pytest.mark.parametrize("text", [
    f"Authorization: Bearer {TOKEN}",
    f"authorization: BEARER {TOKEN} and bearer short1",
    f"the bearer significantly improved; Incorrect API key provided: {KEY}",
    f'{{"error": "bad", "api_key": "{TOKEN}"}}',
    json.dumps({"content": f'echo "api_key": "{TOKEN}"'}),  # escaped quotes inside a transcript
    f"https://host/v1?key=1&access_token={TOKEN}&x-api-key={TOKEN}",
    f"apİ_key={TOKEN} apı-key={TOKEN} acceſs_token={TOKEN} api\u212aey: {TOKEN}",  # what IGNORECASE takes for ASCII
    f"x-API-Key: {TOKEN}; ACCESS-TOKEN = '{TOKEN}'",
    "risk-benefit of sk-short; prompt_tokens 12, completion_tokens 4, cached_tokens 0",
    "Which drug? µg/kg ≥ 5, İstanbul, ſ, naïve: no secret at all",
    "",
])
def test_the_words_never_change_what_is_masked(text: str) -> None:
    assert redact(text) == _every_pattern(text)


def test_a_text_without_the_words_comes_back_unchanged() -> None:
    text = json.dumps({"messages": [{"role": "user", "content": "Which option? A: 5 mg, B: 10 mg"}],
                       "usage": {"prompt_tokens": 40, "completion_tokens": 4}})
    assert redact(text) == text
    assert redact(f"{text} Bearer {TOKEN}") == f"{text} Bearer {MASK}"


def test_the_remembered_secrets_follow_every_change_of_the_environment_and_the_registered_keys(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`_secrets` keeps its list between calls (it runs several times a question); any change of the
    environment (a variable set, changed in place, removed) or a key registered is seen at once."""
    first, second, registered = "envsecret-" + "x" * 12, "envsecret-" + "y" * 12, "registered-" + "z" * 12
    monkeypatch.delenv("MP_TEST_API_KEY", raising=False)
    assert redact(f"a {first} b") == f"a {first} b"
    monkeypatch.setenv("MP_TEST_API_KEY", first)
    assert redact(f"a {first} b") == f"a {MASK} b"
    monkeypatch.setenv("MP_TEST_API_KEY", second)  # the same variable, another value of the same length
    assert redact(f"{first} {second}") == f"{first} {MASK}"
    monkeypatch.delenv("MP_TEST_API_KEY")
    assert redact(f"{first} {second}") == f"{first} {second}"
    monkeypatch.setattr(redaction, "_registered", set(redaction._registered))  # undone after the test
    redaction.register_secret(registered)
    assert redact(f"key {registered}") == f"key {MASK}"
    # Unchanged: the very list object comes back, so nothing was recomputed.
    assert redaction._secrets() is redaction._secrets()
