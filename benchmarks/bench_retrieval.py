"""Retrieval benchmark: ingest time for the shared corpus and query latency per retriever.

    python -m benchmarks.bench_retrieval --corpus-dir ../shared/data/corpus [--dense]

Ingests into a scratch MEDPANEL_HOME (removed afterwards unless --home is given), compares our
BM25 retriever (with provenance) against raw bm25s on the same texts and queries, and prints
mean/p50/p95 latency against the 10 ms/query target. Queries are MedAgentsBench MedQA question
stems (read here only as query text). The dense part runs only with --dense (about 20 minutes on
2 cores for 31.7k chunks); otherwise it is estimated from embedding a sample when the [dense]
extra is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import bm25s

from medpanel.retrieval import bm25_index, ingest, open_retriever
from medpanel.retrieval.docstore import DocStore
from medpanel.retrieval.errors import DenseUnavailableError
from medpanel.retrieval.medrag_jsonl import expand_inputs, read_jsonl

TARGET_MS = 10.0


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _latency(fn: Callable[[str], object], queries: Sequence[str], warmup: int = 5) -> dict[str, float]:
    for query in queries[:warmup]:
        fn(query)
    samples = []
    for query in queries:
        started = time.perf_counter()
        fn(query)
        samples.append((time.perf_counter() - started) * 1000)
    return {
        "mean": statistics.fmean(samples),
        "p50": _percentile(samples, 0.5),
        "p95": _percentile(samples, 0.95),
    }


def _load_queries(paths: Sequence[Path], n: int) -> list[str]:
    """The first n question stems, taking files in order (MedQA hard has only 100)."""
    queries: list[str] = []
    for path in paths:
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    queries.append(json.loads(line)["question"])
                if len(queries) == n:
                    return queries
    return queries


def _row(label: str, stats: dict[str, float], raw_mean: float | None) -> str:
    vs_raw = f"{stats['mean'] / raw_mean:5.2f}x raw" if raw_mean else "         "
    return (
        f"  {label:<22} mean {stats['mean']:7.2f} ms  p50 {stats['p50']:7.2f}  p95 {stats['p95']:7.2f}  "
        f"{stats['mean'] / TARGET_MS:5.2f}x target  {vs_raw}"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus-dir", type=Path, default=Path("../shared/data/corpus"))
    parser.add_argument("--questions", type=Path, nargs="+", default=None, help="JSONL files with a 'question' field")
    parser.add_argument("--n-queries", type=int, default=200)
    parser.add_argument("-k", type=int, default=16)
    parser.add_argument("--dense", action="store_true", help="also embed the corpus (slow) and time dense/hybrid")
    parser.add_argument("--embed-sample", type=int, default=256, help="chunks embedded for the dense estimate")
    parser.add_argument("--home", type=Path, default=None, help="MEDPANEL_HOME to ingest into (kept)")
    args = parser.parse_args(argv)

    bench = args.corpus_dir.parent / "medagentsbench"
    # MedQA first (the query set); it has only 100 hard items, so other subsets fill up.
    questions = args.questions or sorted(
        bench.glob("*/test_hard.jsonl"), key=lambda p: (p.parent.name != "medqa", p.parent.name)
    )
    queries = _load_queries(questions, args.n_queries)
    home = args.home or Path(tempfile.mkdtemp(prefix="medpanel-bench-"))
    os.environ["MEDPANEL_HOME"] = str(home)

    files = expand_inputs([args.corpus_dir])
    store = DocStore(p.doc for f in files for p in read_jsonl(f) if p.doc is not None)
    texts = store.indexed_texts()
    print(f"corpus: {len(store)} docs from {len(files)} files; {len(queries)} queries; k={args.k}")

    started = time.perf_counter()
    raw = bm25s.BM25()
    raw.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    raw_index_s = time.perf_counter() - started

    def raw_search(query: str) -> object:
        tokens = bm25s.tokenize(query, stopwords="en", show_progress=False)
        return raw.retrieve(tokens, k=args.k, show_progress=False)

    try:
        started = time.perf_counter()
        report = ingest([args.corpus_dir], "bench", dense=args.dense, progress=True)
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        again = ingest([args.corpus_dir], "bench", dense=False, progress=False)
        reingest_s = time.perf_counter() - started
        started = time.perf_counter()
        bm25 = open_retriever("bench", "bm25")
        open_s = time.perf_counter() - started

        print("\ningest")
        print(f"  raw bm25s tokenize+index     {raw_index_s:6.2f} s")
        print(
            f"  medpanel ingest (BM25 part)  {report.seconds_read + report.seconds_bm25:6.2f} s "
            f"(read+validate {report.seconds_read:.2f} s, tokenize+index+save {report.seconds_bm25:.2f} s); "
            f"total {ingest_s:.2f} s; {len(report.problems)} malformed lines"
        )
        print(
            f"  re-ingest, nothing changed   {reingest_s:6.2f} s ({again.n_unchanged} unchanged, "
            f"{again.n_updated + again.n_new} changed)"
        )
        print(f"  open BM25 retriever          {open_s:6.2f} s (index + docs into memory, once per process)")
        if args.dense:
            print(f"  dense embed ({report.n_embedded} chunks)  {report.seconds_dense:6.1f} s")
        else:
            print("  dense embed                  " + _dense_estimate(texts, args.embed_sample))

        print(f"\nquery latency over {len(queries)} queries (target {TARGET_MS:.0f} ms/query)")
        raw_stats = _latency(raw_search, queries)
        print(_row("raw bm25s", raw_stats, None))
        print(
            _row(
                "medpanel bm25 (+prov.)",
                _latency(lambda q: bm25.search(q, args.k), queries),
                raw_stats["mean"],
            )
        )
        tokenize_stats = _latency(bm25_index.tokenize_query, queries)
        print(_row("  of which tokenize", tokenize_stats, raw_stats["mean"]))
        if args.dense:
            for kind in ("dense", "hybrid"):
                retriever = open_retriever("bench", kind)
                stats = _latency(lambda q, r=retriever: r.search(q, args.k), queries)  # type: ignore[misc]
                print(_row(f"medpanel {kind}", stats, raw_stats["mean"]))
        else:
            print("  dense / hybrid: not run (pass --dense; embeds the whole corpus first)")
    finally:
        if args.home is None:
            shutil.rmtree(home, ignore_errors=True)


def _dense_estimate(texts: Sequence[str], sample: int) -> str:
    try:
        # Optional heavy dependency: the [dense] extra (torch, sentence-transformers).
        from medpanel.retrieval.embedding import default_embedding_function

        embedder = default_embedding_function()
        embedder(["warm up the model"])
    except DenseUnavailableError as err:
        return f"not measured ({err}); issue's figure: ~40 s per 1,000 chunks on 2 cores"
    chunk = list(texts[:sample])
    started = time.perf_counter()
    embedder(chunk)
    per_chunk = (time.perf_counter() - started) / len(chunk)
    return (
        f"estimated {per_chunk * len(texts) / 60:5.1f} min for {len(texts)} chunks "
        f"({per_chunk * 1000:.1f} ms/chunk over a {len(chunk)}-chunk sample; run with --dense to measure)"
    )


if __name__ == "__main__":
    main()
