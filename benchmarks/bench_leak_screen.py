"""Benchmark: the Challenger's answer screen on a labelled set of challenge texts.

    python -m benchmarks.bench_leak_screen [--misses]

Four team-written sets hold challenge texts over option sets shaped like medical multiple-choice
questions, each labelled with its phrasing family: `leak_screen.yaml` (the development set, written
before the screen's rules) and `leak_screen_later.yaml`, `_third.yaml`, `_fourth.yaml` (each written
after a revision of the rules; their headers give their figures as first measured). Printed for each
set: per family how many texts the screen flags, then its recall (leaks flagged / leaks) and its
false-positive rate (clean texts flagged / clean texts) against the targets (recall >= 0.95, false
positives <= 0.05); then the sets written after the development set, pooled. `--misses` lists the
texts it gets wrong.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml

from medpanel.methods.panel.roles.challenger import leaks

HERE = Path(__file__).parent
SETS = tuple(HERE / f"leak_screen{part}.yaml" for part in ("", "_later", "_third", "_fourth"))
RECALL_TARGET = 0.95
FALSE_POSITIVE_TARGET = 0.05


@dataclass(frozen=True)
class Item:
    set: str
    options: dict[str, str]
    family: str
    text: str

    @property
    def leak(self) -> bool:
        """A family's name says its label: `clean-...` families name no option as the answer."""
        return not self.family.startswith("clean-")


@dataclass(frozen=True)
class Family:
    name: str
    leak: bool
    n: int
    flagged: int


@dataclass(frozen=True)
class Figures:
    families: list[Family]
    recall: float
    false_positive: float
    misses: list[Item]
    """Leaks not flagged and clean texts flagged."""


def load(path: Path) -> list[Item]:
    """The labelled texts of one set file (a malformed entry: ValueError naming the set and entry)."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    items = []
    for name, block in doc["sets"].items():
        options = {str(k): str(v) for k, v in block["options"].items()}
        for i, entry in enumerate(block["texts"]):
            if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(x, str) for x in entry)):
                raise ValueError(f"{path.name}: sets.{name}.texts.{i} must be [family, text], not {entry!r}")
            items.append(Item(name, options, entry[0], entry[1]))
    return items


def figures(items: Iterable[Item], screen: Callable[[str, dict[str, str]], bool] = leaks) -> Figures:
    by_family: dict[str, list[bool]] = {}
    misses = []
    for item in items:
        flagged = screen(item.text, item.options)
        by_family.setdefault(item.family, []).append(flagged)
        if flagged != item.leak:
            misses.append(item)
    families = [Family(name, not name.startswith("clean-"), len(v), sum(v)) for name, v in by_family.items()]
    families.sort(key=lambda f: (not f.leak, f.name))
    leak_n = sum(f.n for f in families if f.leak)
    clean_n = sum(f.n for f in families if not f.leak)
    recall = sum(f.flagged for f in families if f.leak) / leak_n if leak_n else float("nan")
    false_positive = sum(f.flagged for f in families if not f.leak) / clean_n if clean_n else float("nan")
    return Figures(families, recall, false_positive, misses)


def report(path: Path, fig: Figures, *, misses: bool) -> list[str]:
    n_sets = len({m.set for m in load(path)})
    lines = [f"{path.name}: {sum(f.n for f in fig.families)} texts over {n_sets} option sets",
             f"  {'family':<24} {'label':<6} {'n':>4} {'flagged':>8} {'rate':>6}"]
    for f in fig.families:
        lines.append(f"  {f.name:<24} {'leak' if f.leak else 'clean':<6} {f.n:>4} {f.flagged:>8} "
                     f"{f.flagged / f.n:>6.2f}")
    ok_r = "ok" if fig.recall >= RECALL_TARGET else "BELOW TARGET"
    ok_f = "ok" if fig.false_positive <= FALSE_POSITIVE_TARGET else "ABOVE TARGET"
    lines.append(f"  recall {fig.recall:.3f} (target >= {RECALL_TARGET}: {ok_r}); false positives "
                 f"{fig.false_positive:.3f} (target <= {FALSE_POSITIVE_TARGET}: {ok_f})")
    if misses:
        lines += [f"  {'missed' if m.leak else 'flagged'} [{m.set}/{m.family}] {m.text}" for m in fig.misses]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--misses", action="store_true", help="list the texts the screen gets wrong")
    args = ap.parse_args()
    for path in SETS:
        print("\n".join(report(path, figures(load(path)), misses=args.misses)))
    later = figures(item for path in SETS[1:] for item in load(path))
    print(f"sets written after the development set, pooled: recall {later.recall:.3f}, false positives "
          f"{later.false_positive:.3f}")


if __name__ == "__main__":
    main()
