"""A faster `__init__` for the frozen, slotted dataclasses a report makes by the hundred thousand.

A frozen dataclass's own `__init__` sets each field through `object.__setattr__` (its
`__setattr__` refuses): three times the cost of the object itself. A full-protocol report makes one
`EventFacts` per transcript event and one `CallCost` per model call (150,000 and 110,000 on one),
so `quick_init` gives such a class an `__init__` that sets each slot through the slot's own
descriptor instead: the same signature, defaults and instances (still frozen: assigning to one
raises as before), a third of the time.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """`cls` (a `@dataclass(frozen=True, slots=True)` without `__post_init__` or default
    factories) with its `__init__` replaced by one that sets the slots through their descriptors."""
    params = dataclasses.fields(cls)  # type: ignore[arg-type]
    if not all(f.init for f in params) or hasattr(cls, "__post_init__") or "__slots__" not in cls.__dict__ \
            or any(f.default_factory is not dataclasses.MISSING for f in params):
        raise TypeError(f"quick_init takes a frozen, slotted dataclass with plain fields, not {cls.__name__}")
    env: dict[str, Any] = {}
    args, sets = [], []
    for i, f in enumerate(params):
        env[f"_set{i}"] = cls.__dict__[f.name].__set__  # the slot's member descriptor
        if f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            env[f"_default{i}"] = f.default
            args.append(f"{f.name}=_default{i}")
        sets.append(f"    _set{i}(self, {f.name})")
    # Generated like dataclasses' own __init__, so the signature (names, order, defaults) is theirs.
    source = f"def __init__(self, {', '.join(args)}):\n" + "\n".join(sets) + "\n"
    exec(source, env)  # the source is built above from the class's own field names
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
