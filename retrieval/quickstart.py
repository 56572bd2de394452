"""The quickstart corpus: ~40 short passages on common clinical topics, written by the team.

It ships inside the package (`retrieval/data/quickstart_corpus.jsonl`) so a first run needs no
download and no shared data; `ensure_quickstart_corpus()` ingests it (BM25 only) on first use.
"""

from __future__ import annotations

import threading
from importlib import resources
from pathlib import Path

from medpanel.retrieval.corpus import ingest
from medpanel.retrieval.home import MANIFEST_NAME, corpora_root

QUICKSTART_NAME = "quickstart"
_LOCK = threading.Lock()  # parallel workers asking at once should ingest it once


def quickstart_corpus_file() -> Path:
    """Path of the packaged JSONL (a real file: the package is installed unzipped)."""
    return Path(str(resources.files("medpanel.retrieval") / "data" / "quickstart_corpus.jsonl"))


def ensure_quickstart_corpus(*, progress: bool = False) -> Path:
    """Ingest the quickstart corpus into `$MEDPANEL_HOME/corpora/quickstart` unless it is there."""
    folder = corpora_root() / QUICKSTART_NAME
    with _LOCK:
        if not (folder / MANIFEST_NAME).is_file():
            ingest([quickstart_corpus_file()], QUICKSTART_NAME, dense=False, progress=progress)
    return folder
