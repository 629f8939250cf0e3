"""The HNSW graph over a ``FaissIndex``'s sealed base rows: built off the lock, then read-only.

The graph is FAISS's ``IndexHNSW`` wrapped in ``IndexIDMap`` (FAISS ids are the index's
labels), in one of two storage kinds:

- ``FLOAT32`` (``IndexHNSWFlat``): the graph's storage holds the float vectors, and after
  the build it *is* the base segment (the index reads it through a view), so every vector
  is held once. Scores are exact.
- ``SQ8`` (``IndexHNSWSQ``, FAISS's 8-bit scalar quantiser trained per dimension): one byte
  per dimension, a quarter of float32. The graph walks on quantised vectors; the index
  re-ranks the candidates exactly from the float vectors, which stay in the base segment
  (memory-mapped from the saved file after a reopen, so only the pages of re-ranked
  candidates become resident).

A graph never changes after its build: searches run concurrently with no lock of their
own, and a saved one is memory-mapped (FAISS's ``IO_FLAG_MMAP_IFC``: the neighbour lists
and the storage codes are views of the file), so reopening a million vectors costs the
page faults its searches touch rather than a read of the whole file.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dense._faiss import background_build_threads, faiss_module, omp_threads
from dense._graph_layout import check_lengths
from dense._vector_store import Labels, SealPlan, Vectors

BUILD_CHUNK = 8_192  # rows per FAISS add: how often a build checks for a stop or a gate
SQ_TRAIN_ROWS = 65_536


class VectorStorage(enum.StrEnum):
    """How the graph stores vectors: ``float32`` (exact scores, 4 bytes per dimension) or
    ``sq8`` (8-bit scalar quantisation, 1 byte per dimension, candidates re-ranked from
    the float vectors)."""

    FLOAT32 = "float32"
    SQ8 = "sq8"

    @classmethod
    def from_str(cls, value: str) -> VectorStorage:
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(v.value for v in cls)
            raise ValueError(f"unknown vector storage {value!r}; valid: {valid}") from None


@dataclass(frozen=True)
class GraphParams:
    m: int
    ef_construction: int
    storage: VectorStorage


class Graph:
    """A built (or loaded) HNSW graph; ``rows`` base rows, searched by label."""

    def __init__(self, index: Any, storage: VectorStorage, owner: object = None) -> None:
        faiss = faiss_module()
        self.index = index
        self.inner = faiss.downcast_index(index.index)
        self.storage = storage
        self.rows = int(index.ntotal)
        self._owner = owner

    def float_view(self) -> Vectors:
        """The float vectors a ``FLOAT32`` graph stores, as a read-only-by-contract view."""
        if self.storage is not VectorStorage.FLOAT32:
            raise ValueError("only a float32 graph stores float vectors")
        faiss = faiss_module()
        storage = faiss.downcast_index(self.inner.storage)
        d = int(storage.d)
        if self.rows == 0:
            return np.zeros((0, d), dtype=np.float32)
        raw = faiss.rev_swig_ptr(storage.codes.data(), self.rows * d * 4)
        view: Vectors = raw.view(np.float32).reshape(self.rows, d)
        return view

    def search(
        self, query: Vectors, k: int, ef: int, selector: Any, threads: int | None
    ) -> tuple[Labels, npt.NDArray[np.float32]]:
        faiss = faiss_module()
        if selector is None:
            params = faiss.SearchParametersHNSW(efSearch=max(ef, k))
        else:
            params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(ef, k))
        with omp_threads(threads):
            scores, labels = self.index.search(query, k, params=params)
        found = labels[0] >= 0
        return labels[0][found].astype(np.int64), scores[0][found]

    def write(self, write: Callable[[bytes], int]) -> None:
        faiss = faiss_module()
        writer = faiss.PyCallbackIOWriter(write)
        faiss.write_index(self.index, writer)
        del writer  # flushes its buffer


def new_graph_index(dimension: int, params: GraphParams) -> Any:
    faiss = faiss_module()
    if params.storage is VectorStorage.FLOAT32:
        inner = faiss.IndexHNSWFlat(dimension, params.m, faiss.METRIC_INNER_PRODUCT)
    else:
        inner = faiss.IndexHNSWSQ(
            dimension, faiss.ScalarQuantizer.QT_8bit, params.m, faiss.METRIC_INNER_PRODUCT
        )
    inner.hnsw.efConstruction = params.ef_construction
    index = faiss.IndexIDMap(inner)
    index.own_fields = True
    inner.this.disown()  # the IDMap deletes it
    return index


def build_graph(
    plan: SealPlan,
    dimension: int,
    params: GraphParams,
    proceed: Callable[[], bool],
    chunk: int = BUILD_CHUNK,
) -> tuple[Graph, Vectors] | None:
    """Insert the plan's rows into a new graph, ``chunk`` rows per FAISS call, asking
    ``proceed()`` before each (``False`` abandons the build: ``None``). Returns the graph
    and the new base segment (the plan's vectors in plan order)."""
    faiss = faiss_module()
    index = new_graph_index(dimension, params)
    inner = faiss.downcast_index(index.index)
    storage = faiss.downcast_index(inner.storage)
    total = len(plan)
    floats: Vectors | None = None
    if params.storage is VectorStorage.FLOAT32:
        storage.codes.resize(total * dimension * 4)  # reserve once: no regrowth copies
        storage.codes.resize(0)
    else:
        floats = np.empty((total, dimension), dtype=np.float32)
        if not proceed():
            return None
        with omp_threads(background_build_threads()):
            index.train(_training_sample(plan, dimension))
    start = 0
    for vectors, labels in plan.chunks(chunk):
        if not proceed():
            return None
        with omp_threads(background_build_threads()):
            index.add_with_ids(vectors, labels)
        if floats is not None:
            floats[start : start + vectors.shape[0]] = vectors
        start += vectors.shape[0]
    graph = Graph(index, params.storage)
    base = graph.float_view() if floats is None else floats
    return graph, base


def _training_sample(plan: SealPlan, dimension: int) -> Vectors:
    """Up to ``SQ_TRAIN_ROWS`` rows spread evenly over the plan."""
    total = len(plan)
    step = max(1, total // SQ_TRAIN_ROWS)
    picks = np.arange(0, total, step)[:SQ_TRAIN_ROWS]
    n_base = int(plan.base_rows.shape[0])
    out = np.empty((picks.shape[0], dimension), dtype=np.float32)
    in_base = picks < n_base
    out[in_base] = plan.base[plan.base_rows[picks[in_base]]]
    out[~in_base] = plan.tail[plan.tail_rows[picks[~in_base] - n_base]]
    return out


def load_graph(
    path: Path, storage: VectorStorage, labels: Labels, dimension: int, section_bytes: int
) -> Graph:
    """Memory-map the FAISS structure at the start of ``path`` (``section_bytes`` long)
    and check it is safe to search: ``ValueError`` if any length, count, offset or
    neighbour is out of range."""
    faiss = faiss_module()
    with open(path, "rb") as fh:
        check_lengths(fh, 0, section_bytes)  # before FAISS allocates what a length says
    try:
        index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC)
    except (RuntimeError, MemoryError, OverflowError) as exc:
        # A damaged length field makes FAISS try to allocate what it says (std::bad_alloc
        # arrives as MemoryError): a damaged file, like any other, not a failed open.
        raise ValueError(f"unreadable graph ({type(exc).__name__}: {exc})") from exc
    if not isinstance(index, faiss.IndexIDMap):
        raise ValueError("the graph is not an id-mapped index")
    graph = Graph(index, storage)
    validate(graph, labels, dimension)
    return graph


def validate(graph: Graph, labels: Labels, dimension: int) -> None:
    """Structural checks that make walking the graph memory-safe."""
    faiss = faiss_module()
    inner, n = graph.inner, graph.rows
    expected = faiss.IndexHNSWFlat if graph.storage is VectorStorage.FLOAT32 else faiss.IndexHNSWSQ
    if not isinstance(inner, expected):
        raise ValueError(f"graph storage is not {graph.storage.value}")
    if int(inner.d) != dimension or int(inner.metric_type) != faiss.METRIC_INNER_PRODUCT:
        raise ValueError("graph dimension or metric differs")
    if int(graph.index.d) != dimension:  # the id map's own copy: FAISS asserts on it per search
        raise ValueError("graph dimension differs")
    if int(inner.ntotal) != n or n != labels.shape[0]:
        raise ValueError("graph size differs from the base segment")
    id_map = faiss.vector_to_array(graph.index.id_map)
    if id_map.shape != labels.shape or not np.array_equal(id_map, labels):
        raise ValueError("graph ids differ from the base labels")
    storage = faiss.downcast_index(inner.storage)
    if int(storage.ntotal) != n or int(storage.codes.size()) != n * int(storage.code_size):
        raise ValueError("graph storage size differs")
    hnsw = inner.hnsw
    levels = faiss.vector_to_array(hnsw.levels).astype(np.int64)
    offsets = faiss.vector_to_array(hnsw.offsets).astype(np.int64)
    cum = faiss.vector_to_array(hnsw.cum_nneighbor_per_level).astype(np.int64)
    if levels.shape != (n,) or offsets.shape != (n + 1,) or cum.shape[0] < 2:
        raise ValueError("graph level tables have the wrong size")
    if n and (levels.min() < 1 or levels.max() >= cum.shape[0]):
        raise ValueError("graph level out of range")
    if offsets[0] != 0 or not np.array_equal(np.diff(offsets), cum[levels]):
        raise ValueError("graph offsets inconsistent with levels")
    size = int(hnsw.neighbors.size())
    if offsets[-1] != size:
        raise ValueError("graph neighbour table has the wrong size")
    if size:
        neighbours = faiss.rev_swig_ptr(hnsw.neighbors.data(), size)
        if int(neighbours.min()) < -1 or int(neighbours.max()) >= n:
            raise ValueError("graph neighbour out of range")
    if n and not (0 <= int(hnsw.entry_point) < n and int(hnsw.max_level) == levels.max() - 1):
        raise ValueError("graph entry point or top level out of range")


def quantised(graph: Graph, floats: Vectors, params: GraphParams) -> Graph:
    """An ``SQ8`` graph with ``graph``'s links (no rebuild): the quantiser is trained on
    and encodes ``floats``, the base vectors ``graph`` covers, in row order."""
    if graph.storage is not VectorStorage.FLOAT32 or params.storage is not VectorStorage.SQ8:
        raise ValueError("only a float32 graph converts, and only to sq8")
    faiss = faiss_module()
    n, dimension = floats.shape
    index = new_graph_index(dimension, params)
    inner = faiss.downcast_index(index.index)
    step = max(1, n // SQ_TRAIN_ROWS)
    with omp_threads(background_build_threads()):
        inner.train(np.ascontiguousarray(floats[::step][:SQ_TRAIN_ROWS]))
        storage = faiss.downcast_index(inner.storage)
        for start in range(0, n, BUILD_CHUNK * 8):
            storage.add(np.ascontiguousarray(floats[start : start + BUILD_CHUNK * 8]))
    inner.hnsw = graph.inner.hnsw  # the links (a view stays a view of the same file)
    inner.ntotal = n
    index.ntotal = n
    faiss.copy_array_to_vector(faiss.vector_to_array(graph.index.id_map), index.id_map)
    return Graph(index, VectorStorage.SQ8, owner=graph)
