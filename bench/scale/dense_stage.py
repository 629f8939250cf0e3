"""The dense arm alone, through the engine's own vector index (``dense.FaissIndex``).

1. Add every vector with the graph build held: the exact path (what a corpus serves
   until its graph is ready) is timed over the real query embeddings.
2. Release the build and keep searching while it runs: the slowest of those searches
   and the time until the graph serves (the build runs on its own thread, on every core).
   When the scale point has a Tandem corpus, its saved graph is loaded instead (see
   ``measure_dense``): its build, timed with searches running, is the Tandem stage's.
3. HNSW (float32): recall@10 against exact search on the same vectors, p50/p95, at the
   engine's ``efSearch`` and any extra values asked for.
4. The same graph quantised to SQ8 (links kept, candidates re-ranked exactly from the
   float vectors): recall@10, p50/p95.

Both indexes are saved into the scale point's work directory, where the
``dense-reopen`` stage reopens each in a fresh process (time to first search, memory).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.scale.source import VectorSource, exact_top
from bench.timing import LatencyStats

K = 10
EXACT_PROBES = 50  # exact search at 1M takes a good fraction of a second per query
PACE_S = 0.5  # searches during a build: one every half second (a lightly used service)
DENSE_FILES = {"float32": "dense-float32.faiss", "sq8": "dense-sq8.faiss"}


def doc_ids(start: int, stop: int) -> list[str]:
    return [f"s{i}" for i in range(start, stop)]


def recall_at_k(truth: npt.NDArray[np.int64], found: npt.NDArray[np.int64]) -> float:
    """Mean fraction of each exact top-k row that the approximate row also holds."""
    if truth.shape != found.shape or truth.size == 0:
        raise ValueError("truth and found must be non-empty arrays of the same shape")
    hits = sum(len(set(t[t >= 0]) & set(f[f >= 0])) for t, f in zip(truth, found, strict=True))
    return hits / truth.size


def timed_search(
    index: Any, probes: npt.NDArray[np.float32], k: int = K
) -> tuple[npt.NDArray[np.int64], LatencyStats]:
    """Search each probe once, one at a time: the rows found and the latencies."""
    found = np.full((probes.shape[0], k), -1, dtype=np.int64)
    samples = []
    for i, probe in enumerate(probes):
        start = time.perf_counter()
        hits = index.search(probe, k)
        samples.append(time.perf_counter() - start)
        found[i, : len(hits)] = [int(doc_id[1:]) for doc_id, _ in hits]
    return found, LatencyStats.from_seconds(samples)


def search_while(
    search: Callable[[int], object], busy: Callable[[], bool], pace_s: float = PACE_S
) -> list[float]:
    """Call ``search(i)`` for i = 0, 1, … one every ``pace_s`` seconds (or back to back
    when a search takes longer) while ``busy()``; the latencies."""
    samples: list[float] = []
    i = 0
    while busy():
        start = time.perf_counter()
        search(i)
        samples.append(time.perf_counter() - start)
        i += 1
        time.sleep(max(0.0, pace_s - samples[-1]))
    return samples


def measure_dense(
    source: VectorSource,
    n_queries: int,
    extra_ef: Sequence[int],
    workdir: Path,
    graph_file: Path | None = None,
) -> dict[str, float]:
    """Steps 1-4 of the module docstring. With ``graph_file`` (the saved vector index of
    the Tandem corpus built from the same vectors) step 2 is skipped and steps 3-4 run on
    that graph: the same engine code with the same parameters built it, and building a
    second one at 1M would cost the run another five minutes of both cores."""
    from dense import FaissIndex, IndexKind, VectorStorage

    out: dict[str, float] = {}
    matrix = source.matrix()
    probes = source.queries(n_queries)
    truth, truth_scores = exact_top(matrix, probes, K)
    out.update(source.describe(truth_scores))

    gate = threading.Event()
    index = FaissIndex(source.dimension, build_gate=gate, build_delay_s=0.0)
    start = time.perf_counter()
    for first in range(0, source.n_docs, 50_000):
        stop = min(first + 50_000, source.n_docs)
        index.add(doc_ids(first, stop), matrix[first:stop])
    out["dense_add_docs_per_s"] = source.n_docs / (time.perf_counter() - start)
    del matrix
    few = min(EXACT_PROBES, probes.shape[0])
    exact_found, exact = timed_search(index, probes[:few])
    out["exact_p50_ms"], out["exact_p95_ms"] = exact.p50_ms, exact.p95_ms
    out["exact_recall_at_10"] = recall_at_k(truth[:few], exact_found)  # 1.0 unless tied

    if graph_file is not None:
        index.close()  # its build never started (the gate stayed shut)
        index = FaissIndex.load(graph_file, build_delay_s=0.0)
        if index.graph_pending:
            raise RuntimeError(f"{graph_file} holds no current graph")
        out["graph_from_tandem_corpus"] = 1.0
    else:
        out.update(_build_while_searching(index, gate, probes))

    # Below the index's ``hnsw_threshold`` no graph is built: every "HNSW" figure is then
    # the exact path's, and the report labels it so.
    out["hnsw_graph_serving"] = float(index.kind is IndexKind.HNSW)
    out["hnsw_ef_search"] = float(index.effective_ef())  # the engine's, for this size
    found, stats = timed_search(index, probes)
    out["hnsw_recall_at_10"] = recall_at_k(truth, found)
    out["hnsw_p50_ms"], out["hnsw_p95_ms"] = stats.p50_ms, stats.p95_ms
    default_ef = index.ef_search
    index.adaptive_ef = False
    for ef in extra_ef:
        index.ef_search = ef
        found, stats = timed_search(index, probes)
        out[f"hnsw_ef{ef}_recall_at_10"] = recall_at_k(truth, found)
        out[f"hnsw_ef{ef}_p50_ms"], out[f"hnsw_ef{ef}_p95_ms"] = stats.p50_ms, stats.p95_ms
    index.ef_search, index.adaptive_ef = default_ef, True
    float_path = workdir / DENSE_FILES["float32"]
    index.save(float_path)
    index.close()
    out["dense_float32_file_mib"] = float_path.stat().st_size / 2**20

    start = time.perf_counter()
    sq8 = FaissIndex.load(float_path, storage=VectorStorage.SQ8, build_delay_s=0.0)
    out["sq8_convert_s"] = time.perf_counter() - start
    out["sq8_graph_serving"] = float(sq8.kind is IndexKind.HNSW)
    found, stats = timed_search(sq8, probes)
    out["sq8_recall_at_10"] = recall_at_k(truth, found)
    out["sq8_p50_ms"], out["sq8_p95_ms"] = stats.p50_ms, stats.p95_ms
    sq8_path = workdir / DENSE_FILES["sq8"]
    sq8.save(sq8_path)
    sq8.close()
    out["dense_sq8_file_mib"] = sq8_path.stat().st_size / 2**20
    return out


def _build_while_searching(
    index: Any, gate: threading.Event, probes: npt.NDArray[np.float32]
) -> dict[str, float]:
    """Open the build gate and search, paced, until the graph serves."""
    out: dict[str, float] = {}
    start = time.perf_counter()
    gate.set()
    during = search_while(
        lambda i: index.search(probes[i % probes.shape[0]], K), lambda: index.graph_pending
    )
    if not index.wait_for_graph(timeout=None):
        raise RuntimeError("the graph build did not finish")
    out["graph_build_s"] = time.perf_counter() - start
    out["searches_during_build"] = float(len(during))
    if during:
        out["slowest_search_during_build_s"] = max(during)
        out["search_during_build_p50_ms"] = LatencyStats.from_seconds(during).p50_ms
    return out


def measure_dense_reopen(
    source: VectorSource, n_queries: int, storage: str, workdir: Path
) -> dict[str, float]:
    """A fresh process reopens one saved index: time to the first answer, latency, and
    (in the caller) the process's peak memory."""
    from dense import FaissIndex

    probes = source.queries(n_queries)
    start = time.perf_counter()
    index = FaissIndex.load(workdir / DENSE_FILES[storage])
    index.search(probes[0], K)
    out = {f"{storage}_reopen_s": time.perf_counter() - start}
    _found, stats = timed_search(index, probes)
    out[f"{storage}_reopened_p50_ms"] = stats.p50_ms
    out[f"{storage}_reopened_p95_ms"] = stats.p95_ms
    index.close()
    return out
