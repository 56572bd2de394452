"""Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

score(d) = sum over rankings r containing d of 1 / (k_rrf + rank_r(d)), with 1-based ranks.
k_rrf = 60 is the paper's constant: it damps the influence of the very top ranks so one list
cannot dominate, and it needs no score calibration between BM25 and cosine similarity, which
live on unrelated scales. Ties are broken by the best single rank, then by id, so the order is
deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

K_RRF = 60


def reciprocal_rank_fusion(rankings: Sequence[Sequence[str]], *, k_rrf: int = K_RRF) -> list[tuple[str, float]]:
    """Fuse ranked id lists (best first) into one list of (id, fused score), best first."""
    scores: dict[str, float] = {}
    best_rank: dict[str, int] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for rank, doc_id in enumerate(ranking, start=1):
            if doc_id in seen:
                continue  # a list that repeats an id counts only its first (best) occurrence
            seen.add(doc_id)
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k_rrf + rank)
            best_rank[doc_id] = min(rank, best_rank.get(doc_id, rank))
    return sorted(scores.items(), key=lambda item: (-item[1], best_rank[item[0]], item[0]))
