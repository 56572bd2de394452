"""Web search backends behind `SearchBackend.search(query, k) -> list[Evidence]` (the evidence-source
registry, `medpanel.retrieval.sources`, opens them by kind).

- `SnapshotSearch` (default, offline): a corpus whose documents carry URLs, searched like the web:
  one result per page (best chunk per URL), `source="web"`, quality judged from the URL. Built
  from the shared corpus, whose MedQuAD chunks carry NIH/CDC URLs.
- `TavilySearch`: Tavily's REST API (`POST {base_url}/search`), key from `TAVILY_API_KEY`. The
  base URL is configurable so contract tests can point it at a local fake server. Its reply is
  bounded like a model's: no redirect followed (the request carries the query), the body read
  decompressed under `max_reply_bytes` and whole within `timeout` seconds, JSON too deep or not
  UTF-8 refused; each is a `SearchBackendError` naming the bound.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from medpanel.retrieval.errors import SearchBackendError, SourceConfigError
from medpanel.retrieval.evidence import Evidence
from medpanel.retrieval.quality import assess_source
from medpanel.retrieval.retrievers import BM25Retriever, Retriever, open_retriever

if TYPE_CHECKING:
    import httpx

TAVILY_BASE_URL = "https://api.tavily.com"
TAVILY_KEY_ENV = "TAVILY_API_KEY"
TAVILY_MAX_RESULTS = 20
TAVILY_MAX_REPLY_BYTES = 8 * 2**20
"""Twenty results' snippets are tens of kilobytes; a longer reply is refused before it is read whole."""
_YEAR_RE = re.compile(r"\b(19|20)\d{2}\b")


@runtime_checkable
class SearchBackend(Protocol):
    """A web-like search: results carry a URL and a title, and a year where known."""

    kind: str

    def search(self, query: str, k: int) -> list[Evidence]:
        """Up to k results, best first, ranks 1..n."""
        ...


class SnapshotSearch:
    """An offline web: a corpus's URL-bearing documents, one hit per URL, `source="web"`."""

    kind = "snapshot"

    def __init__(self, corpus: str | Path | None = None, *, retriever: Retriever | None = None, overfetch: int = 4):
        if retriever is None:
            if corpus is None:
                raise ValueError("SnapshotSearch needs a corpus (NAME or path) or a retriever")
            retriever = open_retriever(corpus, "bm25")
        self.retriever = retriever
        # Several chunks of one page often rank together; fetch extra so k distinct pages remain.
        self.overfetch = overfetch

    def search(self, query: str, k: int) -> list[Evidence]:
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        results: list[Evidence] = []
        seen: set[str] = set()
        for hit in self.retriever.search(query, k * self.overfetch):
            if not hit.url or hit.url in seen:
                continue
            seen.add(hit.url)
            tier, flags = assess_source(hit.url, hit.title, hit.text)
            results.append(
                hit.model_copy(
                    update={
                        "source": "web",
                        "retriever": self.kind,
                        "rank": len(results) + 1,
                        "quality": tier,
                        "flags": flags,
                    }
                )
            )
            if len(results) == k:
                break
        return results


class TavilySearch:
    """Tavily's search API over httpx (sync; one client per instance, close it or use `with`).

    The key travels in the `Authorization: Bearer` header, as Tavily's current API expects, and
    never in the body, so logging a request body cannot leak it.
    """

    kind = "tavily"

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str = TAVILY_BASE_URL,
        search_depth: Literal["basic", "advanced"] = "basic",
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        max_reply_bytes: int = TAVILY_MAX_REPLY_BYTES,
    ):
        key = api_key or os.environ.get(TAVILY_KEY_ENV)
        if not key:
            raise SearchBackendError(
                f"{TAVILY_KEY_ENV} is not set: export it, or use the offline 'snapshot' search backend"
            )
        self.base_url = base_url.rstrip("/")
        self.search_depth = search_depth
        self.timeout = timeout
        self.max_reply_bytes = max_reply_bytes
        # httpx is imported by a Tavily search only: every panel imports this module for its sources.
        import httpx

        # No redirect is followed (httpx's default, stated): the request would carry the query elsewhere.
        self._client = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {key}"}, transport=transport,
                                    follow_redirects=False)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> TavilySearch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def search(self, query: str, k: int) -> list[Evidence]:
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        # Tavily caps max_results at 20 and rejects more; ask for what it can give.
        body = {"query": query, "max_results": min(k, TAVILY_MAX_RESULTS), "search_depth": self.search_depth}
        import httpx  # loaded by __init__: a dictionary lookup

        try:
            with self._client.stream("POST", f"{self.base_url}/search", json=body) as response:
                raw = self._read(response)
        except httpx.HTTPError as err:
            raise SearchBackendError(f"{self.kind}: request to {self.base_url} failed: {err}") from err
        if 300 <= response.status_code < 400:
            raise SearchBackendError(f"{self.kind}: HTTP {response.status_code} from {self.base_url}/search, a "
                                     "redirect, not followed (the request carries the query); set the base URL to "
                                     "the service itself")
        payload = self._json(raw)
        if response.status_code != 200:
            raise SearchBackendError(
                f"{self.kind}: HTTP {response.status_code} from {self.base_url}/search: {_detail(payload, raw)}"
            )
        try:
            raw_results = payload["results"]
            return [_evidence(item, rank) for rank, item in enumerate(raw_results[:k], start=1)]
        except (KeyError, TypeError, AttributeError) as err:
            raise SearchBackendError(f"{self.kind}: unexpected response shape: {err}") from err

    def _read(self, response: httpx.Response) -> bytes:
        """The body, decompressed, refused past `max_reply_bytes` or once `timeout` has passed in all
        (httpx's timeout is per read: a body that drips a byte at a time would never end on it)."""
        deadline = time.monotonic() + self.timeout
        parts: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self.max_reply_bytes:
                raise SearchBackendError(f"{self.kind}: the reply from {self.base_url} is over "
                                         f"{self.max_reply_bytes:,} bytes (decompressed); it was not read further")
            if time.monotonic() > deadline:
                raise SearchBackendError(f"{self.kind}: no whole reply from {self.base_url} within {self.timeout:g} s")
            parts.append(chunk)
        return b"".join(parts)

    def _json(self, raw: bytes) -> Any:
        try:
            return json.loads(raw)
        except RecursionError as err:
            raise SearchBackendError(f"{self.kind}: the reply nests its JSON deeper than it can be read") from err
        except UnicodeDecodeError as err:
            raise SearchBackendError(f"{self.kind}: the reply is not UTF-8 text") from err
        except ValueError:
            return None


def _detail(data: Any, raw: bytes) -> str:
    if data is None:
        return raw[:200].decode("utf-8", errors="replace")
    if isinstance(data, dict):
        detail = data.get("detail", data.get("error", data))
        if isinstance(detail, dict):
            detail = detail.get("error", detail)
        return str(detail)[:200]
    return str(data)[:200]


def _evidence(item: dict[str, Any], rank: int) -> Evidence:
    url = str(item.get("url") or "")
    title = str(item.get("title") or "")
    published = item.get("published_date")
    match = _YEAR_RE.search(str(published)) if published else None
    tier, flags = assess_source(url, title, str(item.get("content") or ""))
    return Evidence(
        text=str(item.get("content") or ""),
        title=title,
        doc_id=url,
        source="web",
        url=url or None,
        year=int(match.group(0)) if match else None,
        score=float(item.get("score") or 0.0),
        retriever=TavilySearch.kind,
        rank=rank,
        quality=tier,
        flags=flags,
    )


def check_separate(local: str | Path, web: str | Path, *, field: str) -> None:
    """Refuse a run whose offline web is its local corpus, or shares a document with it (by id, URL
    or identical text): CLEAR's pathways would then agree by construction, and source quality
    would say nothing about the local evidence."""
    lf, wf = open_retriever(local, "bm25"), open_retriever(web, "bm25")
    fix = ("use two corpora with no document in both, e.g. the PubMed abstracts as the local corpus and "
           "MedQuAD's web pages as the web (docs/methods/knowledge.md: Retrieval corpora)")
    if not (isinstance(lf, BM25Retriever) and isinstance(wf, BM25Retriever)):
        return  # `open_retriever(..., "bm25")` gives one; another kind has no folder or store to compare
    if lf.corpus_dir == wf.corpus_dir:
        raise SourceConfigError(f"the offline web {str(web)!r} is the local corpus {str(local)!r}; {fix}",
                                field=field)
    ls, ws = lf.store, wf.store
    for what, a, b in (("id", ls.ids, ws.ids), ("URL", ls.urls, ws.urls), ("text", ls.contents, ws.contents)):
        shared = ({x for x in a if x} & {x for x in b if x})
        if shared:
            example = sorted(shared)[0][:60]
            raise SourceConfigError(
                f"the offline web {str(web)!r} and the local corpus {str(local)!r} share {len(shared)} "
                f"document(s) by {what} (e.g. {example!r}); {fix}", field=field)
