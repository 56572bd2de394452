"""The packaged corpora: the quickstart corpus and the quickstart web, both written by the team.

- `quickstart` (`retrieval/data/quickstart_corpus.jsonl`): ~40 short passages on common clinical
  topics, no URLs: the default local corpus.
- `quickstart-web` (`retrieval/data/quickstart_web.jsonl`): a small offline "web" of low- and
  medium-tier pages on the built-in sample questions only, some of them deliberately wrong
  (`QUICKSTART_WEB_WRONG`), so CLEAR's override guard and challenge audit have conflicting, unequal
  sources to adjudicate. All hosts are reserved example domains (`*.example.org` is medium by the
  `.org` fallback, `*.example.com`/`.net` low), so no real site is misquoted. It shares no
  document with `quickstart`.

Both ship inside the package so a first run needs no download and no shared data;
`ensure_packaged(name)` ingests one (BM25 only) on first use.
"""

from __future__ import annotations

import threading
from importlib import resources
from pathlib import Path

from medpanel.retrieval.corpus import ingest
from medpanel.retrieval.home import MANIFEST_NAME, corpora_root

QUICKSTART_NAME = "quickstart"
QUICKSTART_WEB_NAME = "quickstart-web"
PACKAGED: dict[str, str] = {QUICKSTART_NAME: "quickstart_corpus.jsonl", QUICKSTART_WEB_NAME: "quickstart_web.jsonl"}
"""Corpus name -> its JSONL under retrieval/data/."""
QUICKSTART_WEB_WRONG: frozenset[str] = frozenset({
    "qw-003", "qw-004", "qw-007", "qw-011", "qw-014", "qw-017", "qw-020", "qw-023", "qw-026", "qw-028", "qw-030",
    "qw-033", "qw-035",  # low tier: forums, blogs, shops
    "qw-037", "qw-038",  # medium tier and outdated: an old digest names the wrong artery, old notes put aspirin first
})
"""Pages of `quickstart-web` written wrong on purpose (their text is never marked as such: the
models must weigh them by source and content, as CLEAR does)."""
_LOCK = threading.Lock()  # parallel workers asking at once should ingest it once


def packaged_file(name: str) -> Path:
    """Path of a packaged JSONL (a real file: the package is installed unzipped)."""
    return Path(str(resources.files("medpanel.retrieval") / "data" / PACKAGED[name]))


def ensure_packaged(name: str, *, progress: bool = False) -> Path:
    """Ingest a packaged corpus into `$MEDPANEL_HOME/corpora/<name>` unless it is there."""
    folder = corpora_root() / name
    with _LOCK:
        if not (folder / MANIFEST_NAME).is_file():
            ingest([packaged_file(name)], name, dense=False, progress=progress)
    return folder


def ensure_quickstart_corpus(*, progress: bool = False) -> Path:
    return ensure_packaged(QUICKSTART_NAME, progress=progress)


def web_corpus_for(corpus: str, web: str | None) -> str | None:
    """The offline web's corpus: `web` if given; the packaged quickstart web when the local corpus
    is the packaged quickstart corpus; else None (a run must then name its web)."""
    if web:
        return web
    return QUICKSTART_WEB_NAME if corpus == QUICKSTART_NAME else None
