"""Keeping a ``FaissIndex``'s graph in step with its vectors, on a thread of its own.

After every write (under the index's write lock) ``after_write`` masks retired rows out
of the serving graph, drops a graph no longer wanted, compacts without a graph, and
wakes the builder when ``dense._policy`` says a build is due.

A build, on the builder thread: wait for writes to pause; plan the live rows under the
read lock (searches go on; writers wait a moment); build the graph off the lock, and
the plan's new id table with it — the ids of the planned rows only, labelled by their
position (``SealPlan.new_ids``), which is how a rebuild drops the ids of documents
replaced or removed since the last one; then swap graph, rows and table in under the
write lock, so a search sees the old state or the new one, never a mix. Rows written
during the build join the new table there (``VectorStore.install``). A build planned
before the store was restructured some other way (``layout`` changed) is not installed:
the builder plans again.

Nothing here refers back to the index (the builder's job is a method of this object,
which ``BackgroundBuilder.close`` forgets): a closed index is freed, and the file it
maps closed, as soon as nothing else holds it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, Self, TypeVar, cast, overload

from dense import _policy
from dense._builder import BackgroundBuilder, Proceed
from dense._graph import Graph, GraphParams, build_graph
from dense._rwlock import RWLock
from dense._search import ServingGraph
from dense._vector_store import VectorStore
from dense.index_file import FaissIndexCorrupt, Verification

logger = logging.getLogger(__name__)
T = TypeVar("T")


class Upkept(Generic[T]):
    """A ``FaissIndex`` attribute whose one copy is the ``GraphUpkeep`` attribute of the
    same name, which the builder reads (set it as a plain attribute: a change applies
    from the next write or build, and ``save`` writes what the builder uses)."""

    def __init__(self, convert: Callable[[str, Any], T]) -> None:
        self._convert = convert  # (name, value) -> the value, checked; ValueError if not

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, index: None, owner: type | None = None) -> Self: ...
    @overload
    def __get__(self, index: object, owner: type | None = None) -> T: ...
    def __get__(self, index: object, owner: type | None = None) -> T | Self:
        if index is None:
            return self
        return cast(T, getattr(index._upkeep, self._name))  # type: ignore[attr-defined]

    def __set__(self, index: object, value: T) -> None:
        checked = self._convert(self._name, value)  # before the builder can see it
        setattr(index._upkeep, self._name, checked)  # type: ignore[attr-defined]


class GraphUpkeep:
    def __init__(
        self,
        store: VectorStore,
        lock: RWLock,
        params: GraphParams,
        threshold: int,
        build_delay_s: float,
        build_gate: threading.Event | None,
        on_graph: Callable[[], None] | None,
    ) -> None:
        self._store = store
        self._lock = lock
        self.hnsw_threshold = threshold  # these four are ``FaissIndex`` attributes (``Upkept``)
        self.hnsw_m = params.m
        self.ef_construction = params.ef_construction
        self.storage = params.storage
        self.build_delay_s = build_delay_s
        self._on_graph = on_graph
        self.serving: ServingGraph | None = None
        self.layout = 0  # bumped whenever the store is restructured outside a build
        self.last_write = time.monotonic()
        self.verification: Verification | None = None  # digests still to check
        self.damaged: FaissIndexCorrupt | None = None
        self.builder = BackgroundBuilder(self._step, "faiss-index-build", build_gate)

    @property
    def graph(self) -> Graph | None:
        serving = self.serving
        return None if serving is None else serving.graph

    def set_graph(self, graph: Graph | None) -> None:
        self.serving = None if graph is None else ServingGraph(graph)

    def wants_graph(self) -> bool:
        return self._store.size >= self.hnsw_threshold and self._store.size > 0

    def build_due(self) -> bool:
        graph = self.graph
        rows = None if graph is None else graph.rows
        return _policy.build_due(self._store, rows, self.wants_graph())

    def after_write(self) -> None:
        """Under the write lock: keep the graph mask current, drop a graph no longer
        wanted, compact retired rows without a graph, and wake the builder if a build is
        due."""
        store = self._store
        if self.serving is not None and not self.wants_graph():
            self.set_graph(None)
            store.unseal()
            self.layout += 1
        if self.serving is not None and store.retired_base:
            self.serving.mask_retired(store)
        if self.serving is None and _policy.compaction_due(
            store, self.wants_graph(), self.builder.closed
        ):
            store.unseal()  # new arrays: a plan being read keeps the old ones
            self.layout += 1  # a build planned before this cannot install
        if self.build_due():
            self.builder.request()

    def wait_for_graph(self, timeout: float | None = None) -> bool:
        """Wait until no build is due or running; ``False`` on timeout (or if closed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not self.builder.wait_idle(left) or self.builder.closed:
                return False
            with self._lock.read():
                if not self.build_due():
                    return True
            self.builder.request()
            if deadline is not None and time.monotonic() >= deadline:
                return False

    # ------------------------------------------------------------ builder thread
    def _step(self, proceed: Proceed) -> bool:
        """One background unit: verify a freshly loaded file, or build and install a
        graph. Returns True to be run again (another build may be due)."""
        if self.verification is not None:
            self._verify(proceed)
        if not self.builder.wait_quiet(
            lambda: self.last_write, lambda: self.build_delay_s, _policy.MAX_DELAYS
        ):
            return False
        with self._lock.read():
            if not self.build_due():
                return False
            plan = self._store.plan()
            layout = self.layout
            params = GraphParams(self.hnsw_m, self.ef_construction, self.storage)
        start = time.perf_counter()
        built = build_graph(plan, self._store.dimension, params, proceed)
        if built is None or not proceed():
            return False
        graph, base = built
        ids = plan.new_ids()  # off the lock: the relabelled table of the planned rows
        with self._lock.write():
            if layout != self.layout:  # restructured under the build: plan again
                return True
            self._store.install(plan, base, graph, ids)
            self.set_graph(graph)
            self.after_write()
            table = len(self._store.ids)
        logger.info(
            "built %s HNSW graph over %d vectors in %.1f s (id table: %d ids)",
            params.storage.value,
            len(plan),
            time.perf_counter() - start,
            table,
        )
        if self._on_graph is not None:
            self._on_graph()
        return True

    def _verify(self, proceed: Proceed) -> None:
        verification, self.verification = self.verification, None
        if verification is None:
            return
        try:
            verification.run(proceed)
        except FaissIndexCorrupt as exc:
            self.damaged = exc
            logger.error("vector index file failed its checksum: %s", exc)
