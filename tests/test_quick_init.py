"""`quick_init`: the facts a report makes per event and per call keep their dataclass contract
(signature, defaults, equality, frozen) with the faster `__init__`."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from medpanel.experiments.analysis.event_facts import EventFacts
from medpanel.experiments.analysis.inference.ledger import CallCost
from medpanel.experiments.analysis.quick_init import quick_init


@dataclasses.dataclass(frozen=True, slots=True)
class _Plain:
    a: int
    b: str = "x"
    c: tuple[int, ...] = ()


@quick_init
@dataclasses.dataclass(frozen=True, slots=True)
class _Quick:
    a: int
    b: str = "x"
    c: tuple[int, ...] = ()


def test_an_instance_is_the_one_the_dataclass_makes_by_position_keyword_and_default() -> None:
    cases: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((1,), {}), ((1, "y"), {}), ((1,), {"c": (2,)}),
                                                           ((), {"a": 3, "b": "z", "c": (1, 2)})]
    for args, kwargs in cases:
        fast, plain = _Quick(*args, **kwargs), _Plain(*args, **kwargs)
        assert (fast.a, fast.b, fast.c) == (plain.a, plain.b, plain.c)
        assert fast == _Quick(*args, **kwargs) and hash(fast) == hash(_Quick(*args, **kwargs))
    assert repr(_Quick(1)) == "_Quick(a=1, b='x', c=())"
    assert list(inspect.signature(_Quick).parameters) == ["a", "b", "c"]


def test_it_stays_frozen_and_refuses_what_the_dataclass_refuses() -> None:
    q = _Quick(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.a = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        _Quick()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Quick(1, "x", (), 4)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Quick(1, d=2)  # type: ignore[call-arg]
    assert dataclasses.replace(q, b="y") == _Quick(1, "y")


def test_a_class_it_cannot_speed_up_is_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    for cls in (NoSlots, Factory):
        with pytest.raises(TypeError, match="quick_init"):
            quick_init(cls)


def test_the_report_facts_use_it_and_keep_their_fields() -> None:
    for cls in (EventFacts, CallCost):
        assert "_set0" in cls.__init__.__globals__  # quick_init's, not the dataclass's own
    e = EventFacts("call", "r", "a", 1, 2, "turn:1", "turn", "c", None, {}, 3, 4, "m", False, 1, None)
    assert e.act is None and dataclasses.replace(e, round=5).round == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.kind = "note"  # type: ignore[misc]
    c = CallCost("r", "s", "m", 1, 2, False, 1, False, True)
    assert dataclasses.astuple(c) == ("r", "s", "m", 1, 2, False, 1, False, True)
