"""Evidence sources: one typed spec, one registry, and the sources medpanel ships.

A setting that names where evidence comes from (`settings.source`, CLEAR's `dynamic_source`) names
a *kind* in this registry. A kind is a `Source` subclass: it declares whether its results are web
documents (a URL and a source-quality tier on each, so it can be CLEAR's dynamic pathway) and
whether it reads a corpus, and it is built from a `SourceSpec` (the kind plus the corpus and
retriever it needs). Built in:

- `corpus`: a local corpus through a retriever (`bm25`, `dense`, `hybrid`);
- `snapshot`: an offline web, a URL-bearing corpus searched one hit per page;
- `tavily`: Tavily's live web search (`TAVILY_API_KEY`, network).

A researcher's own source needs no fork: `source: mypkg.search:MySource` (a `Source` subclass on
`sys.path`), `register_source(MySource)`, or an entry point in the `medpanel.sources` group.
Sources open lazily, on their first search; `open()` opens one now, so a missing corpus fails a
run before any model call.
"""

from __future__ import annotations

import abc
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from medpanel import plugins
from medpanel.retrieval.errors import SourceConfigError
from medpanel.retrieval.evidence import Evidence
from medpanel.retrieval.retrievers import Retriever, open_retriever
from medpanel.retrieval.search import SnapshotSearch, TavilySearch

ENTRY_POINTS = "medpanel.sources"


class SourceSpec(BaseModel):
    """Which source, over what: everything needed to open one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: str
    """A registered kind (`corpus`, `snapshot`, `tavily`), `module:Class`, or an entry point's name."""
    corpus: str | None = None
    """The corpus NAME or folder the source reads (the local corpus, or the offline web's)."""
    retriever: str = "bm25"
    """How a corpus is searched: bm25, dense or hybrid."""


class Source(abc.ABC):
    """Where passages come from: `search(query, k)` returns up to k `Evidence`, best first, ranks 1..n."""

    kind: ClassVar[str] = ""
    """Its name in the registry (and on its evidence as `retriever`, for the web kinds)."""
    web: ClassVar[bool] = False
    """Its results are web documents: a URL and a source-quality tier on each."""
    needs_corpus: ClassVar[bool] = False
    """It reads `spec.corpus`, which must then be set."""

    def __init__(self, spec: SourceSpec) -> None:
        if self.needs_corpus and not spec.corpus:
            raise SourceConfigError(f"the {spec.kind} source needs a corpus", field="settings.corpus")
        self.spec = spec

    def open(self) -> None:  # noqa: B027  (optional: a source with nothing to load keeps this)
        """Load what the first search would (an index, a client), so a problem shows before any model call."""

    @abc.abstractmethod
    def search(self, query: str, k: int) -> list[Evidence]: ...


class _Lazy(Source):
    """A source whose backend is built once, on first use."""

    def __init__(self, spec: SourceSpec) -> None:
        super().__init__(spec)
        self._backend: Retriever | SnapshotSearch | TavilySearch | None = None

    @abc.abstractmethod
    def _build(self) -> Retriever | SnapshotSearch | TavilySearch: ...

    def open(self) -> None:
        if self._backend is None:
            self._backend = self._build()

    def search(self, query: str, k: int) -> list[Evidence]:
        self.open()
        assert self._backend is not None
        return list(self._backend.search(query, k))


class CorpusSource(_Lazy):
    kind = "corpus"
    needs_corpus = True

    def _build(self) -> Retriever:
        assert self.spec.corpus is not None
        return open_retriever(self.spec.corpus, self.spec.retriever)


class SnapshotSource(_Lazy):
    kind = SnapshotSearch.kind
    web = True
    needs_corpus = True

    def _build(self) -> SnapshotSearch:
        return SnapshotSearch(self.spec.corpus)


class TavilySource(_Lazy):
    kind = TavilySearch.kind
    web = True

    def _build(self) -> TavilySearch:
        return TavilySearch()


OFFLINE_WEB = SnapshotSource.kind
"""The web kind a run uses when it names no live search: the offline web of `web_corpus`."""

SOURCES: dict[str, type[Source]] = {cls.kind: cls for cls in (CorpusSource, SnapshotSource, TavilySource)}
"""Kind name -> its class. `register_source` adds to it."""


def register_source(cls: type[Source]) -> type[Source]:
    """Make `cls.kind` usable wherever a scenario names a source (also as a class decorator)."""
    SOURCES[cls.kind] = cls
    return cls


def kinds(*, web: bool | None = None) -> list[str]:
    """The registered kinds (and installed entry points), or only the web (or non-web) ones."""
    names = [n for n, c in SOURCES.items() if web is None or c.web == web]
    return names + [n for n in plugins.entry_point_names(ENTRY_POINTS) if n not in names and web is None]


def source_class(kind: str) -> type[Source]:
    """The class a kind names; a `SourceConfigError` (field `settings.source`) naming the known ones."""
    found: object = SOURCES.get(kind)
    if found is None:
        try:
            found = plugins.load(kind, ENTRY_POINTS, "evidence source")
        except plugins.PluginError as exc:
            raise SourceConfigError(str(exc), field="settings.source") from None
    if found is None:
        raise SourceConfigError(f"unknown source {kind!r}; use one of {', '.join(kinds())}, or module:ClassName for "
                                "your own", field="settings.source")
    if not (isinstance(found, type) and issubclass(found, Source)):
        raise SourceConfigError(f"{kind!r} is not an evidence source: subclass medpanel.retrieval.sources.Source",
                                field="settings.source")
    return found


def open_source(spec: SourceSpec) -> Source:
    """The source `spec` describes (opened lazily: call `open()` to load it now)."""
    return source_class(spec.kind)(spec)
