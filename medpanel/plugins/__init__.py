"""Loading a researcher's own class by name: `module:attr`, or an installed package's entry point.

Both registries (pipelines in `medpanel.agents.pipelines.registry`, evidence sources in
`medpanel.retrieval.sources`) accept a name they do not know in one of two forms:

- `mypkg.methods:MyPanel`: the attribute `MyPanel` of the module `mypkg.methods`, imported from
  `sys.path` (the current directory, `PYTHONPATH`, installed packages);
- a plain name that an installed distribution declares in the registry's entry-point group
  (`[project.entry-points."medpanel.pipelines"] my-panel = "mypkg.methods:MyPanel"`).
"""

from __future__ import annotations

import importlib
import re
from importlib import metadata

_MODULE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
"""An absolute dotted module name."""
_ATTR = re.compile(r"[A-Za-z_]\w*")


class PluginError(LookupError):
    """A name that resolves to nothing loadable; the message says what was tried and the fix."""


def is_path(name: str) -> bool:
    return ":" in name


def load(name: str, group: str, what: str) -> object | None:
    """The object `name` names, or None when it is neither a `module:attr` path nor an entry point
    of `group`. An import that fails is a `PluginError` naming the module and the reason."""
    if is_path(name):
        module_name, _, attr = name.partition(":")
        if not _MODULE.fullmatch(module_name) or not _ATTR.fullmatch(attr):
            # A relative (`..evil`), empty or otherwise malformed name never reaches the import system.
            raise PluginError(f"{name!r} is not a {what} path: write module:ClassName, an absolute dotted module "
                              "name and a class name (mypkg.methods:MyPanel)")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise PluginError(f"cannot import the {what} {name!r} ({exc}). Put its module on PYTHONPATH or install "
                              "its package") from None
        except Exception as exc:  # the module itself fails as it runs (a SyntaxError, its own raise)
            raise PluginError(f"the module of the {what} {name!r} fails as it is imported ({type(exc).__name__}: "
                              f"{exc}). Fix that module") from None
        found: object | None = vars(module).get(attr)
        if found is None:
            raise PluginError(f"module {module_name!r} has no {attr!r} for the {what} {name!r}. Write it as "
                              "module:ClassName") from None
        return found
    for entry in metadata.entry_points(group=group, name=name):
        return load_entry(entry, group, what)
    return None


def load_entry(entry: metadata.EntryPoint, group: str, what: str) -> object:
    """What the entry point `entry` of `group` names; an import that fails is a `PluginError`."""
    try:
        loaded: object = entry.load()
    except Exception as exc:  # ImportError, or the module failing as it runs
        raise PluginError(f"the {what} {entry.name!r} (entry point {entry.value} of {group}) cannot be imported "
                          f"({type(exc).__name__}: {exc})") from None
    return loaded


def installed(group: str, own: str, what: str) -> list[metadata.EntryPoint]:
    """Every entry point of `group`, refused when none is medpanel's own (a value starting with `own`):
    package metadata written before its methods had rooms would otherwise make every built-in name
    unknown, or drop its tables from every report without a word."""
    entries = list(metadata.entry_points(group=group))
    if not any(entry.value.startswith(own) for entry in entries):
        raise PluginError(f"medpanel's own {what} are not registered in {group} (its installed metadata is older "
                          "than its code): reinstall it, make setup or pip install -e .")
    return entries


def entry_point_names(group: str) -> list[str]:
    return sorted({e.name for e in metadata.entry_points(group=group)})
