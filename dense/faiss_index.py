"""``FaissIndex``: string ids over FAISS, cosine by inner product, filters inside search.

Structure. Every string id gets an int64 *label* (what FAISS returns). The unit vectors
are the source of truth (``dense._vector_store``): a sealed *base* segment, which an HNSW
graph covers, and a *tail* of rows added since; the graph can be rebuilt at any time.
Each compaction relabels the rows it keeps and drops the ids no row refers to, so the id
table holds the rows held, not every id ever added (``AllowList`` objects follow).

Exact or HNSW. Below ``hnsw_threshold`` vectors every search is exact (one matrix-vector
product over the stored vectors). At or above it the index wants an HNSW graph
(``hnsw_m`` links per node, ``ef_construction`` while building, ``ef_search`` while
searching), and it builds one **in the background**, on a thread of its own, from a
snapshot of the rows — searches never wait for a build. Until the graph is ready they
are answered exactly over the same vectors (slower, correct); then the graph is swapped
in under the write lock, atomically: a search sees the old state or the new one, and
the answers differ only as far as HNSW's recall allows. Rows added after the snapshot,
and any added later, form the tail, which searches score exactly beside the graph;
replaced and removed rows are masked out of graph results. Once enough has changed
(``dense._policy``), the next graph is built the same way (``dense._upkeep``). Falling
below the threshold drops the graph. Without a graph, replaced and removed rows are
compacted away in place once they outnumber the live rows, so a small corpus that keeps
being updated does not grow.

Storage. ``storage=VectorStorage.FLOAT32`` (default): the graph stores the float vectors
and they *are* the base segment (held once). ``VectorStorage.SQ8``: the graph holds
8-bit codes (a quarter of the memory); its candidates are re-ranked exactly from the
float vectors, which a reopened index memory-maps instead of loading.

Filters. ``search(..., allow=...)`` applies the allow-list inside FAISS through an
``IDSelectorBitmap``, so the top-k is cut among eligible vectors only. Small eligible
sets (``<= exact_filter_limit``) are scored exactly, and a graph search that finds fewer
than ``k`` eligible hits falls back to the exact path, so a filtered search returns
``min(k, eligible)`` results either way.

Ordering: best score first; equal scores by id (see ``search``). How one query is
answered from the segments and the graph lives in ``dense._search``.

Concurrency: any number of concurrent searches, one writer at a time (readers/writer
lock); FAISS and numpy searches run without the GIL. ``close()`` stops the builder.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from dense import _policy
from dense._graph import Graph, GraphParams, VectorStorage
from dense._index_args import as_storage, check_args, checked_count, checked_delay
from dense._persist import graph_to_serve, restore_store, snapshot_to_save
from dense._rwlock import RWLock
from dense._search import SearchParams, ordered_hits, positive_int
from dense._search import search as search_store
from dense._upkeep import GraphUpkeep, Upkept
from dense._vector_store import VectorStore, unit_rows
from dense.allow_list import AllowList, refuse_single_id
from dense.index_file import FaissIndexCorrupt, map_vectors, read_snapshot, write_snapshot

__all__ = ["AllowList", "FaissIndex", "FaissIndexCorrupt", "IndexKind", "VectorStorage"]

logger = logging.getLogger(__name__)

MAX_TIE_FETCH = 4_096
"""Candidates read at most to order a tie across the cut of a search."""


class IndexKind(enum.Enum):
    FLAT = "flat"
    HNSW = "hnsw"


class FaissIndex:
    """A cosine-similarity vector index keyed by string ids.

    Args:
        dimension: vector length (384 for all-MiniLM-L6-v2).
        hnsw_threshold: build an HNSW graph once this many vectors are stored (default
            50,000: below that an exact scan of 384-d vectors takes a few milliseconds).
            ``0`` means always.
        hnsw_m: HNSW links per node (memory vs recall).
        ef_construction: HNSW candidate list size while building.
        ef_search: HNSW candidate list size while searching (at least twice ``k``).
        adaptive_ef: grow the search list with the graph (``effective_ef``): on realistic
            384-d vectors, the recall@10 that efSearch 128 gives at 100,000 vectors needs
            about 768 at a million. Runtime only.
        exact_filter_limit: filtered searches with at most this many eligible vectors
            are scored exactly instead of walking the graph.
        storage: how the graph stores vectors (``VectorStorage``; saved with the index).
        search_threads: OpenMP threads for each search on this index, applied around the
            call on whichever thread searches (``None``: FAISS's default, one per core).
            One is best for many small concurrent queries (a 300-vector flat search took
            11 ms at the default pool size instead of 0.1 ms on a busy box). Graph builds
            use all cores but one regardless. A runtime choice: not saved with the index.
        build_delay_s: a build starts once no write has arrived for this long, so a bulk
            load builds once at its end rather than after every batch (but at the
            latest ``_policy.MAX_DELAYS`` delays after it became due). Runtime only.
        build_gate: while this event is clear, a background build waits before each
            step (for tests and maintenance windows; ``None``: never waits).
        on_graph: called (on the builder thread, no lock held) after a new graph was
            swapped in, e.g. to schedule a save. Runtime only.
    """

    # Build parameters: the builder's own, read and set through the index.
    hnsw_threshold: Upkept[int] = Upkept(checked_count)
    hnsw_m: Upkept[int] = Upkept(checked_count)
    ef_construction: Upkept[int] = Upkept(checked_count)
    storage: Upkept[VectorStorage] = Upkept(lambda _, value: as_storage(value))

    def __init__(
        self,
        dimension: int,
        *,
        hnsw_threshold: int = 50_000,
        hnsw_m: int = 16,
        ef_construction: int = 40,
        ef_search: int = 128,
        exact_filter_limit: int = 2_048,
        storage: VectorStorage | str = VectorStorage.FLOAT32,
        search_threads: int | None = 1,
        adaptive_ef: bool = True,
        build_delay_s: float = 1.0,
        build_gate: threading.Event | None = None,
        on_graph: Callable[[], None] | None = None,
    ) -> None:
        check_args(
            build_delay_s=build_delay_s,
            search_threads=search_threads,
            dimension=dimension,
            hnsw_threshold=hnsw_threshold,
            hnsw_m=hnsw_m,
            ef_construction=ef_construction,
            ef_search=ef_search,
            exact_filter_limit=exact_filter_limit,
        )
        self.dimension = dimension
        self.ef_search = ef_search
        self.exact_filter_limit = exact_filter_limit
        if not isinstance(storage, VectorStorage):
            storage = VectorStorage.from_str(storage)
        self.search_threads = search_threads
        self.adaptive_ef = adaptive_ef

        self._lock = RWLock()
        self._owner = object()  # identity token for AllowList
        self._store = VectorStore(dimension)
        graph_params = GraphParams(hnsw_m, ef_construction, storage)
        self._upkeep = GraphUpkeep(
            self._store,
            self._lock,
            graph_params,
            hnsw_threshold,
            float(build_delay_s),
            build_gate,
            on_graph,
        )
        self._builder = self._upkeep.builder
        self.origin: dict[str, Any] | None = None
        """What the caller said the file it was loaded from reflects (``save``'s
        ``origin``), as read back; ``None`` for a file saved without one."""

    @property
    def build_delay_s(self) -> float:
        return self._upkeep.build_delay_s

    @build_delay_s.setter
    def build_delay_s(self, seconds: float) -> None:
        self._upkeep.build_delay_s = checked_delay(seconds)
        self._builder.wake()  # a builder waiting out the old delay looks again

    @property
    def damaged(self) -> FaissIndexCorrupt | None:
        """Set if a check failed (a checksum after load, a mapped file at save)."""
        return self._upkeep.damaged

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
        """What searches use right now: ``HNSW`` once a graph serves, else ``FLAT``."""
        return IndexKind.FLAT if self._upkeep.serving is None else IndexKind.HNSW

    @property
    def _graph(self) -> Graph | None:
        return self._upkeep.graph

    @property
    def _layout(self) -> int:
        return self._upkeep.layout

    @property
    def graph_pending(self) -> bool:
        """True while the index wants a graph (or a fresher one) that is not serving yet."""
        with self._lock.read():
            return self._upkeep.build_due()

    def effective_ef(self, rows: int | None = None) -> int:
        """The efSearch a graph over ``rows`` vectors (default: the current graph) uses."""
        if rows is None:
            graph = self._graph
            rows = 0 if graph is None else graph.rows
        return _policy.effective_ef(self.ef_search, self.adaptive_ef, rows)

    @property
    def identity(self) -> object:
        """A token unique to this index for as long as anything holds it (its allow-lists
        do): key caches of its allow-lists by it, not by ``id(index)``, which a new index
        created after this one was freed may take over."""
        return self._owner

    def wait_for_graph(self, timeout: float | None = None) -> bool:
        """Wait until no build is due or running; ``False`` on timeout (or if closed)."""
        return self._upkeep.wait_for_graph(timeout)

    # -------------------------------------------------------------------- writing
    def add(self, ids: Sequence[str], vectors: npt.ArrayLike) -> None:
        """Insert or replace (upsert) vectors; the last of duplicate ids wins.

        Vectors are L2-normalised here; zero or non-finite vectors raise ``ValueError``.
        """
        refuse_single_id(ids)
        ids = list(ids)
        if not ids and np.size(vectors) == 0:
            return
        matrix = unit_rows(vectors, self.dimension)
        if len(ids) != matrix.shape[0]:
            raise ValueError(f"{len(ids)} ids but {matrix.shape[0]} vectors")
        if any(not isinstance(i, str) for i in ids):
            raise ValueError("ids must be strings")
        last = {doc_id: pos for pos, doc_id in enumerate(ids)}  # dedupe, last wins
        ids, matrix = list(last), matrix[list(last.values())]
        with self._lock.write():
            self._store.upsert(ids, matrix)
            self._upkeep.last_write = time.monotonic()
            self._upkeep.after_write()

    def remove(self, ids: Iterable[str]) -> int:
        """Remove ids (unknown ids are ignored); return how many were removed."""
        refuse_single_id(ids)
        with self._lock.write():
            removed = self._store.remove(ids)
            if removed:
                self._upkeep.last_write = time.monotonic()
                self._upkeep.after_write()
            return len(removed)

    def allow_list(self, ids: Iterable[str]) -> AllowList:
        """Compile ids into a reusable ``AllowList`` for ``search(allow=...)``."""
        with self._lock.read():
            return AllowList(self._owner, ids, self._store.ids, self._store.eras.current)

    def close(self) -> None:
        """Stop the background builder (an unfinished build is dropped, to be redone by
        whoever opens the index next). Searches and writes keep working, exactly."""
        self._builder.close()

    # -------------------------------------------------------------------- search
    def search(
        self, vector: npt.ArrayLike, k: int, allow: AllowList | Iterable[str] | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` nearest stored ids by cosine similarity, best first.

        ``allow`` restricts results to those ids (applied inside the search); with it,
        ``min(k, eligible)`` results come back. Equal scores are ordered by id, never by
        the internal label (which depends on the order documents were added), and a tie
        across the cut is resolved among every id with the cut-off score (up to
        ``MAX_TIE_FETCH`` candidates): two builds of one corpus rank identically.
        """
        k = positive_int(k, "k")
        query = unit_rows(vector, self.dimension)
        if query.shape[0] != 1:
            raise ValueError("search takes exactly one vector")
        if allow is not None and not isinstance(allow, AllowList):
            allow = self.allow_list(allow)
        cap = max(MAX_TIE_FETCH, k + 1)
        fetch = k + 1  # one past the cut: does the last kept score tie the next?
        with self._lock.read():
            store, serving = self._store, self._upkeep.serving
            allowed = None
            if allow is not None:
                allowed = allow.compiled(self._owner, store.ids, store.eras.current)
            ef = self.effective_ef(0 if serving is None else serving.graph.rows)
            params = SearchParams(ef, self.exact_filter_limit, self.search_threads)
            while True:
                labels, scores = search_store(store, serving, query, fetch, allowed, params)
                found = int(labels.shape[0])
                if found < fetch or scores[k - 1] > scores[found - 1] or fetch >= cap:
                    break
                fetch = min(fetch * 2, cap)
            ids = store.ids
            hits = [
                (ids[label], score)
                for label, score in zip(labels.tolist(), scores.tolist(), strict=True)
            ]
        return ordered_hits(hits, k)

    # --------------------------------------------------------------- persistence
    def save(self, path: str | Path, *, origin: Mapping[str, Any] | None = None) -> None:
        """Write the index to ``path`` atomically (temp file, fsync, rename, fsync dir).

        ``origin``: JSON-able notes the caller keeps with the file — what it reflects —
        read back as ``origin`` of the index ``load`` returns (the engine records its
        store and the store ``seq``, so a file from elsewhere is told apart).

        Written from the live arrays under the read lock (searches go on; writers wait).
        A graph still being built is not saved: whoever loads the file builds it again.
        With an SQ8 graph the float vectors are then read from the saved file (memory-
        mapped) rather than kept in memory.

        Raises ``FaissIndexCorrupt`` (and sets ``damaged``), leaving ``path`` as it was,
        if vectors this index maps from its file no longer match the file's checksums
        (the file was overwritten in place): the caller rebuilds from its own copy.
        """
        path = Path(path)
        with self._lock.read():
            store = self._store
            storage = self.storage if self._graph is None else self._graph.storage
            snap = snapshot_to_save(store, self._graph, self._params(), storage)
            if origin is not None:
                snap = dataclasses.replace(snap, origin=dict(origin))
            try:
                # ``store.base`` may be a mapped file that changed in place since it was
                # opened: then the save refuses to copy it, and the index is damaged.
                offsets = write_snapshot(path, snap, sources=(store.base,))
            except FaissIndexCorrupt as exc:
                self._upkeep.damaged = exc
                logger.error("vector index file changed while mapped: %s", exc)
                raise
            base = store.base
        if "base_vectors" in offsets and snap.graph is not None and type(base) is np.ndarray:
            mapped, reader = map_vectors(path, offsets["base_vectors"], base.shape)
            with self._lock.write():
                if self._store.base is base:  # no build swapped it meanwhile
                    self._store.base = self._store.base_keepalive = mapped
                    self._store.base_reader = reader

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        search_threads: int | None = 1,
        storage: VectorStorage | str | None = None,
        build_delay_s: float = 1.0,
        build_gate: threading.Event | None = None,
        on_graph: Callable[[], None] | None = None,
    ) -> Self:
        """Reopen a saved index; raise ``FaissIndexCorrupt`` if the file is damaged.

        The vectors and the graph are memory-mapped, not read (see ``dense.index_file``);
        if the file holds no current graph, one is built in the background. ``storage``
        overrides the saved choice: a float32 graph is quantised to sq8 on the spot (its
        links are kept); any other change builds a new graph in the background.
        """
        snap, verification = read_snapshot(Path(path))
        params = dict(snap.params)
        if storage is not None:
            params["storage"] = VectorStorage.from_str(str(storage))
        try:
            index = cls(
                snap.dimension,
                search_threads=search_threads,
                build_delay_s=build_delay_s,
                build_gate=build_gate,
                on_graph=on_graph,
                **params,
            )
        except (TypeError, ValueError) as exc:
            raise FaissIndexCorrupt(f"{path}: bad index parameters ({exc})") from exc
        restore_store(index._store, snap, path)
        graph = graph_to_serve(
            snap.graph, index._store, index.hnsw_m, index.ef_construction, index.storage
        )
        upkeep = index._upkeep
        upkeep.set_graph(graph)
        upkeep.verification = verification if verification.spans else None
        index.origin = snap.origin
        with index._lock.write():
            upkeep.after_write()
        if upkeep.verification is not None:
            index._builder.request()
        return index

    # ------------------------------------------------------------------ internals
    def _params(self) -> dict[str, Any]:
        return {
            "hnsw_threshold": self.hnsw_threshold,
            "hnsw_m": self.hnsw_m,
            "ef_construction": self.ef_construction,
            "ef_search": self.ef_search,
            "exact_filter_limit": self.exact_filter_limit,
            "storage": self.storage.value,
        }
