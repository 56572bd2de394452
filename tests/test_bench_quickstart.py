"""The quickstart benchmark's floor with an unbounded prefix cache, computed by hand."""

from __future__ import annotations

from benchmarks.bench_quickstart import _chat_text, _common_prefix, perfect_cache_share


def test_common_prefix_counts_equal_leading_characters() -> None:
    assert _common_prefix("abcdef", "abcxyz") == 3
    assert _common_prefix("abc", "abcd") == 3
    assert _common_prefix("x", "y") == 0
    assert _common_prefix("", "abc") == 0


def test_each_request_pays_for_what_follows_its_longest_earlier_prefix() -> None:
    # Sent in time order: "abcxyz" (6 fresh), "abcdef" (shares "abc": 3 fresh), "abcdxx" (shares
    # "abcd" with the second: 2 fresh), "q" (1 fresh): 12 of 19 characters.
    sent = [(2.0, "abcdef"), (1.0, "abcxyz"), (4.0, "q"), (3.0, "abcdxx")]
    assert perfect_cache_share(sent) == 12 / 19
    assert perfect_cache_share([]) == 0.0
    # The same request twice: the second is wholly cached.
    assert perfect_cache_share([(1.0, "abcd"), (2.0, "abcd")]) == 0.5


def test_a_requests_text_keeps_its_roles_apart() -> None:
    system_then_user = _chat_text([{"role": "system", "content": "a"}, {"role": "user", "content": "b"}])
    one_user = _chat_text([{"role": "user", "content": "ab"}])
    assert system_then_user != one_user
    assert _common_prefix(system_then_user, _chat_text([{"role": "system", "content": "a"}])) > 0
