"""Where corpora live: `$MEDPANEL_HOME/corpora/NAME` (MEDPANEL_HOME defaults to `~/.medpanel`)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from medpanel.retrieval.errors import CorpusInputError, CorpusNotFoundError

MANIFEST_NAME = "manifest.json"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def medpanel_home() -> Path:
    """`$MEDPANEL_HOME`, or `~/.medpanel`; read on every call so tests can monkeypatch it."""
    raw = os.environ.get("MEDPANEL_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".medpanel"


def corpora_root() -> Path:
    """The folder holding one sub-folder per ingested corpus."""
    return medpanel_home() / "corpora"


def check_corpus_name(name: str) -> str:
    """A corpus name becomes a folder name, so keep it to a safe, portable alphabet."""
    if not _NAME_RE.match(name):
        raise CorpusInputError(
            f"corpus name {name!r} is not allowed: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def available_corpora() -> list[str]:
    """Names of the corpora under `corpora_root()` that have a manifest."""
    root = corpora_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / MANIFEST_NAME).is_file())


def resolve_corpus(corpus: str | Path) -> Path:
    """The folder of an ingested corpus given by NAME (under `corpora_root()`) or by path.

    A bare name is looked up under the home first; anything else is treated as a path. Raises
    `CorpusNotFoundError` listing what is available and how to ingest.
    """
    text = str(corpus)
    candidates: list[Path] = []
    if isinstance(corpus, str) and _NAME_RE.match(text):
        candidates.append(corpora_root() / text)
    candidates.append(Path(text).expanduser())
    for candidate in candidates:
        if (candidate / MANIFEST_NAME).is_file():
            return candidate.resolve()
    names = ", ".join(available_corpora()) or "none"
    raise CorpusNotFoundError(
        f"unknown corpus {text!r} (looked in {corpora_root()}; available: {names}). "
        f"Create it with: medpanel corpus ingest PATH... --name {Path(text).name or 'NAME'}"
    )
