"""A package's public names imported on first use (PEP 562): its module `__getattr__` and `__dir__`.

A package that imported every name it re-exports would load each submodule with itself: `medpanel`
would bring AutoGen, openai and SciPy to a `--help`, and `medpanel.retrieval` the corpus store and
the web client to every run's first question. Both packages map each name to where it lives and
take these two functions from here, on the lowest floor, which `medpanel.retrieval` may import.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(namespace: dict[str, Any], names: Mapping[str, tuple[str, str]]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for the package whose globals are `namespace`: `names` maps each
    public name to (module, attribute). A name is imported when first looked up and then kept in
    `namespace`, so later lookups do not reach `__getattr__`; any other name is an AttributeError."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        where = names.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where[0]), where[1])
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
