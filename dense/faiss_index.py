"""``FaissIndex``: string ids over FAISS, cosine by inner product, filters inside search.

Structure. Every string id gets an int64 *label* the first time it is added; labels are
never reused or reassigned (a removed id keeps its label), so they stay stable across
save/load and compiled ``AllowList`` objects stay valid. The unit vectors themselves are
kept in a float32 matrix, which is the source of truth: the FAISS structure is derived
from it and can be rebuilt at any time.

Flat or HNSW. Below ``hnsw_threshold`` vectors the index is exact
(``IndexIDMap2(IndexFlatIP)``); at or above it, approximate (``IndexIDMap2`` over
``IndexHNSWFlat`` with inner-product metric, ``hnsw_m`` links per node,
``ef_construction`` at build time and ``ef_search`` at query time). Defaults: M=16 and
efConstruction=40 (FAISS's own; Elasticsearch uses 100, which built 2.6x slower here and
put a 1M-vector build on two cores past ten minutes), efSearch=128. Crossing the
threshold, a removal or an upsert marks the graph stale (HNSW cannot delete) and the
next search rebuilds it from the matrix, once, under the write lock, on every core (see
``dense._faiss``); adds to a current graph extend it in place.

Filters. ``search(..., allow=...)`` applies the allow-list inside FAISS through an
``IDSelectorBitmap``, so the top-k is cut among eligible vectors only. On HNSW, small
eligible sets (``<= exact_filter_limit``) are scored exactly from the matrix, and a graph
search that finds fewer than ``k`` eligible hits falls back to the exact path, so a
filtered search returns ``min(k, eligible)`` results on both kinds.

Concurrency: any number of concurrent searches, one writer at a time (readers/writer
lock); FAISS searches run without the GIL.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from dense._faiss import build_threads, faiss_module, omp_threads
from dense._rwlock import RWLock
from dense._vector_store import Vectors, VectorStore
from dense.allow_list import AllowList
from dense.index_file import FaissIndexCorrupt, IndexSnapshot, read_snapshot, write_snapshot

__all__ = ["AllowList", "FaissIndex", "FaissIndexCorrupt", "IndexKind"]

logger = logging.getLogger(__name__)


class IndexKind(enum.Enum):
    FLAT = "flat"
    HNSW = "hnsw"


class FaissIndex:
    """A cosine-similarity vector index keyed by string ids.

    Args:
        dimension: vector length (384 for all-MiniLM-L6-v2).
        hnsw_threshold: switch from exact flat search to HNSW once this many vectors are
            stored (default 50,000: below that a flat scan of 384-d vectors is well under
            a few milliseconds). ``0`` means always HNSW.
        hnsw_m: HNSW links per node (memory vs recall).
        ef_construction: HNSW candidate list size while building.
        ef_search: HNSW candidate list size while searching (raised to ``k`` if smaller).
        exact_filter_limit: on HNSW, filtered searches with at most this many eligible
            vectors are scored exactly instead of walking the graph.
        search_threads: OpenMP threads for each search on this index, applied around the
            call on whichever thread searches (``None``: FAISS's default, one per core).
            One is best for many small concurrent queries (a 300-vector flat search took
            11 ms at the default pool size instead of 0.1 ms on a busy box). Graph builds
            use every core regardless. A runtime choice: not saved with the index.
    """

    def __init__(
        self,
        dimension: int,
        *,
        hnsw_threshold: int = 50_000,
        hnsw_m: int = 16,
        ef_construction: int = 40,
        ef_search: int = 128,
        exact_filter_limit: int = 2_048,
        search_threads: int | None = 1,
    ) -> None:
        if search_threads is not None and (
            not isinstance(search_threads, int)
            or isinstance(search_threads, bool)
            or search_threads < 1
        ):
            raise ValueError(f"search_threads must be an int >= 1 or None, got {search_threads!r}")
        self.search_threads = search_threads
        for name, value, low in (
            ("dimension", dimension, 1),
            ("hnsw_threshold", hnsw_threshold, 0),
            ("hnsw_m", hnsw_m, 2),
            ("ef_construction", ef_construction, 1),
            ("ef_search", ef_search, 1),
            ("exact_filter_limit", exact_filter_limit, 0),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        self.dimension = dimension
        self.hnsw_threshold = hnsw_threshold
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self.exact_filter_limit = exact_filter_limit

        self._lock = RWLock()
        self._owner = object()  # identity token for AllowList
        self._store = VectorStore(dimension)
        self._kind = IndexKind.FLAT
        self._stale = False
        self._index: Any = self._new_faiss(IndexKind.FLAT)

    # ----------------------------------------------------------------- inspection
    def __len__(self) -> int:
        return self._store.size

    def __contains__(self, doc_id: object) -> bool:
        if not isinstance(doc_id, str):
            return False
        with self._lock.read():
            return self._store.contains(doc_id)

    def ids(self) -> list[str]:
        """The stored ids, in storage order."""
        with self._lock.read():
            return self._store.stored_ids()

    @property
    def kind(self) -> IndexKind:
        """The FAISS structure searches use (after any pending rebuild)."""
        return self._wanted_kind() if self._stale else self._kind

    # -------------------------------------------------------------------- writing
    def add(self, ids: Sequence[str], vectors: npt.ArrayLike) -> None:
        """Insert or replace (upsert) vectors; the last of duplicate ids wins.

        Vectors are L2-normalised here; zero or non-finite vectors raise ``ValueError``.
        """
        ids = list(ids)
        if not ids and np.size(vectors) == 0:
            return
        matrix = _unit_rows(vectors, self.dimension)
        if len(ids) != matrix.shape[0]:
            raise ValueError(f"{len(ids)} ids but {matrix.shape[0]} vectors")
        if any(not isinstance(i, str) for i in ids):
            raise ValueError("ids must be strings")
        last = {doc_id: pos for pos, doc_id in enumerate(ids)}  # dedupe, last wins
        ids, matrix = list(last), matrix[list(last.values())]
        with self._lock.write():
            self._add_locked(ids, matrix)

    def remove(self, ids: Iterable[str]) -> int:
        """Remove ids (unknown ids are ignored); return how many were removed."""
        with self._lock.write():
            removed = self._store.remove(ids)
            if removed and self._kind is IndexKind.FLAT:
                self._index.remove_ids(np.asarray(removed, dtype=np.int64))
            elif removed:
                self._stale = True  # HNSW cannot delete: rebuild before the next search
            return len(removed)

    def allow_list(self, ids: Iterable[str]) -> AllowList:
        """Compile ids into a reusable ``AllowList`` for ``search(allow=...)``."""
        with self._lock.read():
            return AllowList(self._owner, ids, self._store.label_of, len(self._store.ids))

    # -------------------------------------------------------------------- search
    def search(
        self, vector: npt.ArrayLike, k: int, allow: AllowList | Iterable[str] | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` nearest stored ids by cosine similarity, best first.

        ``allow`` restricts results to those ids (applied inside the search); with it,
        ``min(k, eligible)`` results come back.
        """
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        query = _unit_rows(vector, self.dimension)
        if query.shape[0] != 1:
            raise ValueError("search takes exactly one vector")
        if allow is not None and not isinstance(allow, AllowList):
            allow = self.allow_list(allow)
        while True:
            with self._lock.read():
                if not self._stale:
                    return self._search_locked(query, k, allow)
            with self._lock.write():
                self._rebuild_if_stale()

    # --------------------------------------------------------------- persistence
    def save(self, path: str | Path) -> None:
        """Write the index to ``path`` atomically (temp file, fsync, rename, fsync dir).

        Written from the live arrays under the read lock (searches go on; writers wait):
        copying them first would double the memory a large index needs to save.
        """
        with self._lock.read():
            graph = self._index if self._kind is IndexKind.HNSW and not self._stale else None
            snap = IndexSnapshot(
                dimension=self.dimension,
                ids=self._store.ids,
                labels=self._store.labels,
                vectors=self._store.matrix,
                params=self._params(),
                faiss_index=graph,
            )
            write_snapshot(Path(path), snap)

    @classmethod
    def load(cls, path: str | Path, *, search_threads: int | None = 1) -> Self:
        """Reopen a saved index; raise ``FaissIndexCorrupt`` if the file is damaged."""
        snap = read_snapshot(Path(path))
        try:
            index = cls(snap.dimension, search_threads=search_threads, **snap.params)
        except (TypeError, ValueError) as exc:
            raise FaissIndexCorrupt(f"{path}: bad index parameters ({exc})") from exc
        index._restore(snap)
        return index

    # ------------------------------------------------------------------ internals
    def _params(self) -> dict[str, int]:
        return {
            "hnsw_threshold": self.hnsw_threshold,
            "hnsw_m": self.hnsw_m,
            "ef_construction": self.ef_construction,
            "ef_search": self.ef_search,
            "exact_filter_limit": self.exact_filter_limit,
        }

    def _restore(self, snap: IndexSnapshot) -> None:
        try:
            self._store.restore(snap.ids, snap.labels, snap.vectors)
        except ValueError as exc:
            raise FaissIndexCorrupt(str(exc)) from exc
        rows = self._store.size
        self._kind = self._wanted_kind()
        if self._kind is IndexKind.HNSW and snap.faiss_index is not None:
            self._index = snap.faiss_index
            if self._index.ntotal != rows:
                raise FaissIndexCorrupt("HNSW structure does not match the stored vectors")
        else:
            self._stale = True
            self._rebuild_if_stale()

    def _wanted_kind(self) -> IndexKind:
        return IndexKind.HNSW if self._store.size >= self.hnsw_threshold else IndexKind.FLAT

    def _new_faiss(self, kind: IndexKind) -> Any:
        faiss = faiss_module()
        if kind is IndexKind.FLAT:
            inner = faiss.IndexFlatIP(self.dimension)
        else:
            inner = faiss.IndexHNSWFlat(self.dimension, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = self.ef_construction
        return faiss.IndexIDMap2(inner)

    def _rebuild_if_stale(self) -> None:
        if not self._stale:
            return
        self._kind = self._wanted_kind()
        index = self._new_faiss(self._kind)
        start = time.perf_counter()
        if self._store.size:
            with omp_threads(build_threads()):
                index.add_with_ids(self._store.matrix, self._store.labels)
        self._index = index
        self._stale = False
        level = logging.INFO if self._kind is IndexKind.HNSW else logging.DEBUG
        logger.log(
            level,
            "built %s index over %d vectors in %.1f s",
            self._kind.value,
            self._store.size,
            time.perf_counter() - start,
        )

    def _add_locked(self, ids: list[str], matrix: Vectors) -> None:
        labels, replaced, fresh_rows = self._store.upsert(ids, matrix)
        if self._kind is IndexKind.FLAT and self._wanted_kind() is IndexKind.FLAT:
            if replaced:
                self._index.remove_ids(np.asarray(replaced, dtype=np.int64))
            self._index.add_with_ids(matrix, labels)
        elif self._kind is IndexKind.FLAT or replaced or self._stale:
            self._stale = True  # switch to HNSW, or a graph HNSW can't edit: next search
        elif fresh_rows:
            with omp_threads(build_threads()):
                self._index.add_with_ids(matrix[fresh_rows], labels[fresh_rows])

    def _search_locked(
        self, query: Vectors, k: int, allow: AllowList | None
    ) -> list[tuple[str, float]]:
        store = self._store
        if store.size == 0:
            return []
        faiss = faiss_module()
        if allow is None:
            k = min(k, store.size)
            params = None
            if self._kind is IndexKind.HNSW:
                params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, k))
            return self._faiss_hits(query, k, params)
        labels, selector = allow.compiled(self._owner, store.label_of.get, len(store.ids))
        rows = store.rows_of(labels)
        k = min(k, int(rows.shape[0]))
        if k == 0:
            return []
        if self._kind is IndexKind.FLAT:
            return self._faiss_hits(query, k, faiss.SearchParameters(sel=selector))
        if rows.shape[0] <= self.exact_filter_limit:
            return store.exact_top(query, k, rows)
        params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(self.ef_search, 2 * k))
        hits = self._faiss_hits(query, k, params)
        return hits if len(hits) >= k else store.exact_top(query, k, rows)

    def _faiss_hits(self, query: Vectors, k: int, params: Any) -> list[tuple[str, float]]:
        with omp_threads(self.search_threads):
            scores, labels = self._index.search(query, k, params=params)
        ids = self._store.ids
        return [
            (ids[label], score)
            for label, score in zip(labels[0].tolist(), scores[0].tolist(), strict=True)
            if label >= 0
        ]


def _unit_rows(vectors: npt.ArrayLike, dimension: int) -> Vectors:
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim == 1:
        array = array.reshape(1, -1)
    if array.ndim != 2 or array.shape[1] != dimension:
        raise ValueError(f"expected vectors of dimension {dimension}, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError("vectors contain NaN or infinity")
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    if array.shape[0] and (norms <= 1e-12).any():
        raise ValueError("zero vectors have no direction")
    return np.ascontiguousarray(array / norms, dtype=np.float32)
