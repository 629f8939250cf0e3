"""``FaissIndex``: string ids over FAISS, cosine by inner product, filters inside search.

Structure. Every string id gets an int64 *label* the first time it is added; labels are
never reused or reassigned, so they stay stable across save/load and compiled
``AllowList`` objects stay valid. The unit vectors are the source of truth
(``dense._vector_store``): a sealed *base* segment, which an HNSW graph covers, and a
*tail* of rows added since. The graph is derived and can be rebuilt at any time.

Exact or HNSW. Below ``hnsw_threshold`` vectors every search is exact (one matrix-vector
product over the stored vectors). At or above it the index wants an HNSW graph
(``hnsw_m`` links per node, ``ef_construction`` while building, ``ef_search`` while
searching), and it builds one **in the background**, on a thread of its own, from a
snapshot of the rows — searches never wait for a build. Until the graph is ready they
are answered exactly over the same vectors (slower, correct); then the graph is swapped
in under the write lock, atomically: a search sees the old state or the new one, and
the answers differ only as far as HNSW's recall allows. Rows added after the snapshot,
and any added later, form the tail, which searches score exactly beside the graph;
replaced and removed rows are masked out of graph results. Once the tail and the masked
rows together exceed a tenth of the graph (at least ``_REBUILD_MIN``), the next graph is
built the same way. Falling below the threshold drops the graph. Without a graph, replaced
and removed rows are compacted away in place once they outnumber the live rows (and
number at least ``_COMPACT_MIN``), so a small corpus that keeps being updated does not
grow: labels are kept, so allow-lists stay valid.

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
import math
import operator
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from dense._builder import BackgroundBuilder, Proceed
from dense._graph import Graph, GraphParams, VectorStorage, build_graph, quantised
from dense._rwlock import RWLock
from dense._search import SearchParams, ServingGraph
from dense._search import search as search_store
from dense._vector_store import RowsView, VectorStore, unit_rows
from dense.allow_list import AllowList, refuse_single_id
from dense.index_file import (
    FaissIndexCorrupt,
    IndexSnapshot,
    Verification,
    map_vectors,
    read_snapshot,
    write_snapshot,
)

__all__ = ["AllowList", "FaissIndex", "FaissIndexCorrupt", "IndexKind", "VectorStorage"]

logger = logging.getLogger(__name__)

_MAX_COSINE = 1.001  # beyond float32 rounding of a cosine: a score past it is damage
_REBUILD_MIN = 10_000  # pending rows (tail, retired or not, + masked) before a rebuild ...
_REBUILD_DIVISOR = 10  # ... or a tenth of the graph, whichever is larger; and whenever
_MASKED_DIVISOR = 2  # half of the graph's rows are retired, however few that is
_MAX_DELAYS = 300  # a build waits for a quiet moment at most this many build delays
_EF_BASE_ROWS = 100_000  # adaptive efSearch: ef_search up to this many graph rows, then
_EF_GROWTH = 0.8  # grows as (rows / base) ** growth (807 at 1M from 128), up to
_EF_MAX = 1_024  # this (measured: recall@10 0.979 at 100k/ef 128, 0.962 at 1M/ef 768)
_COMPACT_MIN = 1_024  # without a graph: retired rows held before they are compacted,
# once they also outnumber the live ones (see ``_after_write``)


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
            latest ``_MAX_DELAYS`` delays after it became due). Runtime only.
        build_gate: while this event is clear, a background build waits before each
            step (for tests and maintenance windows; ``None``: never waits).
        on_graph: called (on the builder thread, no lock held) after a new graph was
            swapped in, e.g. to schedule a save. Runtime only.
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
        storage: VectorStorage | str = VectorStorage.FLOAT32,
        search_threads: int | None = 1,
        adaptive_ef: bool = True,
        build_delay_s: float = 1.0,
        build_gate: threading.Event | None = None,
        on_graph: Callable[[], None] | None = None,
    ) -> None:
        if not isinstance(build_delay_s, int | float) or not 0 <= build_delay_s <= 3600:
            raise ValueError(f"build_delay_s must be 0..3600 seconds, got {build_delay_s!r}")
        if search_threads is not None and (
            not isinstance(search_threads, int)
            or isinstance(search_threads, bool)
            or search_threads < 1
        ):
            raise ValueError(f"search_threads must be an int >= 1 or None, got {search_threads!r}")
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
        self.storage = (
            storage if isinstance(storage, VectorStorage) else VectorStorage.from_str(storage)
        )
        self.search_threads = search_threads
        self.build_delay_s = float(build_delay_s)
        self.adaptive_ef = adaptive_ef
        self._on_graph = on_graph
        self._last_write = time.monotonic()

        self._lock = RWLock()
        self._owner = object()  # identity token for AllowList
        self._store = VectorStore(dimension)
        self._serving: ServingGraph | None = None
        self._layout = 0  # bumped whenever the store is restructured outside a build
        self._verification: Verification | None = None
        self.damaged: FaissIndexCorrupt | None = None  # set if a check fails (load, save)
        self.origin: dict[str, Any] | None = None
        """What the caller said the file it was loaded from reflects (``save``'s
        ``origin``), as read back; ``None`` for a file saved without one."""
        self._builder = BackgroundBuilder(self._build_step, "faiss-index-build", build_gate)

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
        return IndexKind.FLAT if self._serving is None else IndexKind.HNSW

    @property
    def _graph(self) -> Graph | None:
        serving = self._serving
        return None if serving is None else serving.graph

    @property
    def graph_pending(self) -> bool:
        """True while the index wants a graph (or a fresher one) that is not serving yet."""
        with self._lock.read():
            return self._build_due()

    def effective_ef(self, rows: int | None = None) -> int:
        """The efSearch a graph over ``rows`` vectors (default: the current graph) uses."""
        if rows is None:
            graph = self._graph
            rows = 0 if graph is None else graph.rows
        if not self.adaptive_ef or rows <= _EF_BASE_ROWS:
            return self.ef_search
        grown = round(self.ef_search * math.pow(rows / _EF_BASE_ROWS, _EF_GROWTH))
        return max(self.ef_search, min(_EF_MAX, grown))

    @property
    def identity(self) -> object:
        """A token unique to this index for as long as anything holds it (its allow-lists
        do): key caches of its allow-lists by it, not by ``id(index)``, which a new index
        created after this one was freed may take over."""
        return self._owner

    def wait_for_graph(self, timeout: float | None = None) -> bool:
        """Wait until no build is due or running; ``False`` on timeout (or if closed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self._builder.wait_idle(left) or self._builder.closed:
                return False
            with self._lock.read():
                if not self._build_due():
                    return True
            self._builder.request()
            if deadline is not None and time.monotonic() >= deadline:
                return False

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
            self._last_write = time.monotonic()
            self._after_write()

    def remove(self, ids: Iterable[str]) -> int:
        """Remove ids (unknown ids are ignored); return how many were removed."""
        refuse_single_id(ids)
        with self._lock.write():
            removed = self._store.remove(ids)
            if removed:
                self._last_write = time.monotonic()
                self._after_write()
            return len(removed)

    def allow_list(self, ids: Iterable[str]) -> AllowList:
        """Compile ids into a reusable ``AllowList`` for ``search(allow=...)``."""
        with self._lock.read():
            return AllowList(self._owner, ids, self._store.ids, len(self._store.ids))

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
        # Any integral (a numpy int too, e.g. from an array's length), as a plain int.
        count = 0 if isinstance(k, bool | np.bool_) else _index_or_zero(k)
        if count < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        k = count
        query = unit_rows(vector, self.dimension)
        if query.shape[0] != 1:
            raise ValueError("search takes exactly one vector")
        if allow is not None and not isinstance(allow, AllowList):
            allow = self.allow_list(allow)
        cap = max(MAX_TIE_FETCH, k + 1)
        fetch = k + 1  # one past the cut: does the last kept score tie the next?
        with self._lock.read():
            store, serving = self._store, self._serving
            allowed = None
            if allow is not None:
                allowed = allow.compiled(self._owner, store.ids.get, len(store.ids))
            ef = self.effective_ef(0 if serving is None else serving.graph.rows)
            params = SearchParams(ef, self.exact_filter_limit, self.search_threads)
            while True:
                labels, scores = search_store(store, serving, query, fetch, allowed, params)
                found = int(labels.shape[0])
                if found < fetch or scores[k - 1] > scores[found - 1] or fetch >= cap:
                    break
                fetch = min(fetch * 2, cap)
            ids = self._store.ids
            hits = [
                (ids[label], score)
                for label, score in zip(labels.tolist(), scores.tolist(), strict=True)
            ]
        if len(hits) > k:
            cut = hits[k - 1][1]
            hits = [hit for hit in hits if hit[1] >= cut]
        if hits and (hits[0][1] > _MAX_COSINE or hits[-1][1] < -_MAX_COSINE):  # best first
            # No two unit vectors score so: damaged vectors, read from a large file before
            # its checksum ran (``damaged``); never let them lead an answer.
            hits = [hit for hit in hits if -_MAX_COSINE <= hit[1] <= _MAX_COSINE]
        hits.sort(key=lambda hit: (-hit[1], hit[0]))
        return hits[:k]

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
            if self._graph is None:  # every live row as base, compacted
                live = store.live_labels()
                ids, labels = self._saved_ids(live)
                snap = IndexSnapshot(
                    dimension=self.dimension,
                    ids=ids,
                    base_labels=labels,
                    base_alive=np.ones(live.shape[0], dtype=np.bool_),
                    base_vectors=RowsView(store, store.rows_of(live)),  # type: ignore[arg-type]
                    tail_labels=np.zeros(0, dtype=np.int64),
                    tail_vectors=np.zeros((0, self.dimension), dtype=np.float32),
                    params=self._params(),
                    storage=self.storage,
                )
            else:
                tail_rows = np.flatnonzero(store.tail_alive)
                tail_labels = store.tail_labels[tail_rows]
                snap = IndexSnapshot(
                    dimension=self.dimension,
                    ids=store.ids.tolist(),
                    base_labels=store.base_labels,
                    base_alive=store.base_alive,
                    base_vectors=store.base,
                    tail_labels=tail_labels,
                    tail_vectors=RowsView(store, store.base_rows + tail_rows),  # type: ignore[arg-type]
                    params=self._params(),
                    storage=self._graph.storage,
                    graph=self._graph,
                )
            if origin is not None:
                snap = dataclasses.replace(snap, origin=dict(origin))
            try:
                # ``store.base`` may be a mapped file that changed in place since it was
                # opened: then the save refuses to copy it, and the index is damaged.
                offsets = write_snapshot(path, snap, sources=(store.base,))
            except FaissIndexCorrupt as exc:
                self.damaged = exc
                logger.error("vector index file changed while mapped: %s", exc)
                raise
            base = store.base
        if "base_vectors" in offsets and snap.graph is not None and type(base) is np.ndarray:
            mapped, reader = map_vectors(path, offsets["base_vectors"], base.shape)
            with self._lock.write():
                if self._store.base is base:  # no build swapped it meanwhile
                    self._store.base = self._store.base_keepalive = mapped
                    self._store.base_reader = reader

    def _saved_ids(self, live: npt.NDArray[np.int64]) -> tuple[list[str], npt.NDArray[np.int64]]:
        """The id table and row labels a save without a graph writes for the ``live``
        labels (under the lock). Every id ever added keeps its label in memory, so once
        removed ids outnumber live ones the file gets only the live ids, relabelled
        ``0..n-1`` in row order: the table does not grow across restarts. Nothing outside
        a file holds its labels — whoever loads it builds a new index (a new ``identity``;
        allow-lists of another index are refused) and follows writes by string id — and
        without a graph the file holds labels only beside its own rows."""
        table = self._store.ids
        if len(table) - int(live.shape[0]) <= int(live.shape[0]):
            return table.tolist(), live
        return [table[label] for label in live.tolist()], np.arange(live.shape[0], dtype=np.int64)

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
        try:
            index._store.restore(
                snap.ids,
                snap.base_vectors,
                snap.base_labels,
                snap.base_alive,
                snap.tail_vectors,
                snap.tail_labels,
                snap.keepalive,
                snap.base_reader,
            )
        except ValueError as exc:
            raise FaissIndexCorrupt(f"{path}: {exc}") from exc
        graph = snap.graph
        if graph is not None and graph.storage is not index.storage:
            if index.storage is VectorStorage.SQ8:
                params_now = GraphParams(index.hnsw_m, index.ef_construction, index.storage)
                graph = quantised(graph, index._store.base, params_now)
            else:
                graph = None
        if graph is not None:
            index._set_graph(graph)
        index._verification = verification if verification.spans else None
        index.origin = snap.origin
        with index._lock.write():
            index._after_write()
        if index._verification is not None:
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

    def _wants_graph(self) -> bool:
        return self._store.size >= self.hnsw_threshold and self._store.size > 0

    def _build_due(self) -> bool:
        if not self._wants_graph():
            return False
        graph = self._graph
        if graph is None:
            return True
        # Every tail row held counts, retired ones too: each is kept and scored until a
        # build's ``install`` compacts it (counting live ones only, a graph whose few
        # documents were updated over and over grew its tail for good).
        pending = self._store.tail_size + self._store.retired_base
        if self._store.retired_base * _MASKED_DIVISOR >= graph.rows:
            return True  # mostly masked: a graph search walks dead rows and comes back short
        return pending >= max(_REBUILD_MIN, graph.rows // _REBUILD_DIVISOR)

    def _after_write(self) -> None:
        """Under the write lock: keep the graph mask current, drop a graph no longer
        wanted, compact retired rows without a graph, and wake the builder if a build is
        due."""
        store = self._store
        if self._graph is not None and not self._wants_graph():
            self._set_graph(None)
            store.unseal()
            self._layout += 1
        if self._serving is not None and store.retired_base:
            self._serving.mask_retired(store)
        if self._serving is None and self._compaction_due():
            store.unseal()  # new arrays: a plan being read keeps the old ones
            self._layout += 1  # a build planned before this cannot install
        if self._build_due():
            self._builder.request()

    def _compaction_due(self) -> bool:
        """Without a graph, retired rows are compacted only here (``install`` never runs
        below the threshold). Compact once they number at least ``_COMPACT_MIN`` and
        outnumber the live rows: each compaction copies the live rows, which at least as
        many retirements paid for since the last one (amortised O(1) per write), and at
        most ``live + max(live, _COMPACT_MIN)`` rows are ever held. Not while a graph is
        wanted and the builder runs: its build's ``install`` compacts, and compacting now
        would void the build (``_layout``)."""
        retired = self._store.retired_rows
        if retired < _COMPACT_MIN or retired <= self._store.size:
            return False
        return not self._wants_graph() or self._builder.closed

    def _set_graph(self, graph: Graph | None) -> None:
        self._serving = None if graph is None else ServingGraph(graph)

    def _build_step(self, proceed: Proceed) -> bool:
        """One background unit: verify a freshly loaded file, or build and install a
        graph. Returns True to be run again (another build may be due)."""
        if self._verification is not None:
            self._verify(proceed)
        if not self._quiet_moment():
            return False
        with self._lock.read():
            if not self._build_due():
                return False
            plan = self._store.plan()
            layout = self._layout
            params = GraphParams(self.hnsw_m, self.ef_construction, self.storage)
        start = time.perf_counter()
        built = build_graph(plan, self.dimension, params, proceed)
        if built is None or not proceed():
            return False
        graph, base = built
        with self._lock.write():
            if layout != self._layout:  # restructured under the build: plan again
                return True
            self._store.install(plan, base, graph)
            self._set_graph(graph)
            self._after_write()
        logger.info(
            "built %s HNSW graph over %d vectors in %.1f s",
            params.storage.value,
            len(plan),
            time.perf_counter() - start,
        )
        if self._on_graph is not None:
            self._on_graph()
        return True

    def _quiet_moment(self) -> bool:
        """Wait until writes pause for ``build_delay_s`` (or waited ``_MAX_DELAYS`` of
        them); ``False`` if the builder closed meanwhile."""
        give_up = time.monotonic() + _MAX_DELAYS * self.build_delay_s
        while True:
            now = time.monotonic()
            quiet_at = self._last_write + self.build_delay_s
            if now >= quiet_at or now >= give_up:
                return not self._builder.closed
            if not self._builder.sleep(min(quiet_at, give_up) - now):
                return False

    def _verify(self, proceed: Proceed) -> None:
        verification, self._verification = self._verification, None
        if verification is None:
            return
        try:
            verification.run(proceed)
        except FaissIndexCorrupt as exc:
            self.damaged = exc
            logger.error("vector index file failed its checksum: %s", exc)


def _index_or_zero(value: Any) -> int:
    """``value`` as a plain int if it is integral (``operator.index``), else 0."""
    try:
        return operator.index(value)
    except TypeError:
        return 0
