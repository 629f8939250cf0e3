"""How a ``FaissIndex`` answers one query from its store and its graph (under its read lock).

Without a graph every search is exact. With one, the graph answers for the base rows it
covers (retired rows masked out by a selector of the labels still live in it) and the
tail is scored exactly beside it; the two are merged by score. Filtered searches with a
small eligible set are exact; a graph search that finds fewer (eligible) hits than asked
falls back to exact scoring. The graph's candidates are scored again exactly, row by row
(an SQ8 graph returns twice ``k`` of them, re-ranked from the float vectors).

Ordering everywhere: best score first, equal scores in ascending label order.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from dense._exact import exact_top
from dense._faiss import faiss_module
from dense._graph import Graph, VectorStorage
from dense._vector_store import Labels, Vectors, VectorStore

Scores = npt.NDArray[np.float32]
Hits = tuple[Labels, Scores]

EMPTY: Hits = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
SQ8_RERANK = 2  # an SQ8 graph returns this many times k candidates to re-rank
MAX_COSINE = 1.001  # beyond float32 rounding of a cosine: a score past it is damage


class ServingGraph:
    """A graph as searches see it, with a selector of the labels still live in it (set
    once a base row is retired; ``None`` while every row the graph covers is live)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.selector: Any = None
        self._bits: npt.NDArray[np.uint8] | None = None

    def mask_retired(self, store: VectorStore) -> None:
        """Clear the bits of retired base rows (call under the write lock)."""
        if self._bits is None:
            faiss = faiss_module()
            size = int(store.base_labels.max()) // 8 + 1 if store.base_rows else 1
            self._bits = np.zeros(size, dtype=np.uint8)
            live = store.base_labels[store.base_alive]
            np.bitwise_or.at(self._bits, live >> 3, (1 << (live & 7)).astype(np.uint8))
            self.selector = faiss.IDSelectorBitmap(self._bits.shape[0], faiss.swig_ptr(self._bits))
            return
        dead = store.base_labels[~store.base_alive]
        np.bitwise_and.at(self._bits, dead >> 3, (~(1 << (dead & 7))).astype(np.uint8))


@dataclass(frozen=True, slots=True)
class SearchParams:
    ef: int  # the index's efSearch for this graph size (at least 2k is used)
    exact_filter_limit: int
    threads: int | None


def ef_for(ef: int, k: int) -> int:
    """A deep window (the engine asks for 100) needs a list well beyond ``k``: with
    efSearch barely above k, SciFact's nDCG@10 lost 0.004 against exact search."""
    return max(ef, 2 * k)


def search(
    store: VectorStore,
    serving: ServingGraph | None,
    query: Vectors,
    k: int,
    allowed: tuple[Labels, Any] | None,
    params: SearchParams,
) -> Hits:
    """The ``k`` best (labels, scores) for ``query``; ``allowed`` is a compiled
    allow-list's (labels, selector), ``None`` for no filter."""
    if store.size == 0:
        return EMPTY
    if allowed is None:
        k = min(k, store.size)
        if serving is None:
            return exact_top(store, query, k)
        ef = ef_for(params.ef, k)
        graph_hits = _graph_top(
            store, serving.graph, query, k, serving.selector, ef, params.threads
        )
        if graph_hits[0].shape[0] < min(k, store.base_rows - store.retired_base):
            # A graph with many retired (masked) rows can come back short: exact instead.
            return exact_top(store, query, k)
        return merge(
            graph_hits,
            exact_top(store, query, k, tail_only=True) if store.tail_live else EMPTY,
            k,
        )
    labels, selector = allowed
    rows = store.rows_of(labels)
    k = min(k, int(rows.shape[0]))
    if k == 0:
        return EMPTY
    if serving is None or rows.shape[0] <= params.exact_filter_limit:
        return exact_top(store, query, k, rows)
    in_base = rows < store.base_rows
    eligible_in_graph = int(np.count_nonzero(in_base))
    graph_hits = EMPTY
    if eligible_in_graph:
        if serving.selector is not None:
            selector = faiss_module().IDSelectorAnd(selector, serving.selector)
        want = min(k, eligible_in_graph)
        ef = ef_for(params.ef, k)
        graph_hits = _graph_top(store, serving.graph, query, want, selector, ef, params.threads)
        if graph_hits[0].shape[0] < want:
            graph_hits = exact_top(store, query, want, rows[in_base])
    tail_rows = rows[~in_base]
    tail_hits = exact_top(store, query, k, tail_rows) if tail_rows.shape[0] else EMPTY
    return merge(graph_hits, tail_hits, k)


def _graph_top(
    store: VectorStore,
    graph: Graph,
    query: Vectors,
    k: int,
    selector: Any,
    ef: int,
    threads: int | None,
) -> Hits:
    want = k if graph.storage is VectorStorage.FLOAT32 else k * SQ8_RERANK
    labels, _graph_scores = graph.search(query, want, max(ef, want), selector, threads)
    # Every candidate is scored again row by row, as the exact path scores the tail: an
    # SQ8 graph's scores are approximate, and even a float32 graph's (FAISS's SIMD sums)
    # can differ from the exact path's in the last bit, so a vector in the graph and its
    # twin in the tail would tie by where they sit instead of by id.
    scores = np.einsum(
        "ij,j->i", store.base_vectors_for_rerank(store.base_row_of(labels)), query[0]
    )
    return top(labels, scores, k)


def merge(a: Hits, b: Hits, k: int) -> Hits:
    if b[0].shape[0] == 0:
        return top(*a, k)
    if a[0].shape[0] == 0:
        return top(*b, k)
    return top(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]), k)


def top(labels: Labels, scores: Scores, k: int) -> Hits:
    """Best ``k`` first; equal scores in ascending label order (deterministic)."""
    order = np.lexsort((labels, -scores))[:k]
    return labels[order], scores[order].astype(np.float32, copy=False)


def positive_int(value: Any, name: str) -> int:
    """``value`` as a plain int if it is integral and positive (a numpy int too, e.g.
    from an array's length; never a bool); ``ValueError`` otherwise."""
    count = 0
    if not isinstance(value, bool | np.bool_):
        try:
            count = operator.index(value)
        except TypeError:
            count = 0
    if count < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return count


def ordered_hits(hits: list[tuple[str, float]], k: int) -> list[tuple[str, float]]:
    """The best ``k`` of ``hits`` (best first, fetched one or more past the cut), equal
    scores by id: a tie across the cut is settled among every hit with the cut-off
    score, so the order never depends on labels (which depend on write order)."""
    if len(hits) > k:
        cut = hits[k - 1][1]
        hits = [hit for hit in hits if hit[1] >= cut]
    if hits and (hits[0][1] > MAX_COSINE or hits[-1][1] < -MAX_COSINE):  # best first
        # No two unit vectors score so: damaged vectors, read from a large file before
        # its checksum ran (``FaissIndex.damaged``); never let them lead an answer.
        hits = [hit for hit in hits if -MAX_COSINE <= hit[1] <= MAX_COSINE]
    hits.sort(key=lambda hit: (-hit[1], hit[0]))
    return hits[:k]
