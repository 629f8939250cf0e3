"""The two stages of one scale point, each meant to run in its own process (peak RSS).

``raw``: tantivy (keyword arm, ingest + p50), FAISS flat and HNSW over the random vectors
(dense arm alone: random query vectors, no embedding), HNSW recall@10 against flat at each
``efSearch`` (the first is the headline; random 384-d vectors are HNSW's hardest case).
``tandem``: Tandem keyword and hybrid corpora through the public API (ingest + p50; the
hybrid corpus embeds each query with its model), then the hybrid search and the query embedding
alone (ONNX floor path) timed in alternating blocks, so their difference is measured under
the same load.
"""

from __future__ import annotations

import enum
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.dataset import BenchDocument
from bench.encoder import EncoderBackend, SentenceEncoder
from bench.errors import BenchError
from bench.runner import WARMUP_QUERIES
from bench.scale.synth import make_corpus, queries, query_vectors, vectors
from bench.systems.base import SystemContext
from bench.timing import LatencyStats, peak_rss_bytes, time_calls, time_interleaved
from bench.vector_cache import DEFAULT_CACHE_DIR

MIB = 1024.0 * 1024.0


class Stage(enum.StrEnum):
    RAW = "raw"
    TANDEM = "tandem"


@dataclass(frozen=True, slots=True)
class ScaleJob:
    n_docs: int
    seed: int
    n_queries: int
    model: str
    stage: Stage
    hnsw_m: int = 16
    hnsw_ef_construction: int = 40
    hnsw_ef_search: tuple[int, ...] = (128, 256)


def run_stage(job: ScaleJob) -> dict[str, float]:
    """Worker entry point: the stage's measurements, names prefixed by what they measure."""
    with tempfile.TemporaryDirectory(prefix=f"bench-scale-{job.stage.value}-") as tmp:
        stage = _raw if job.stage is Stage.RAW else _tandem
        out = stage(job, Path(tmp))
    out.setdefault(f"{job.stage.value}_peak_rss_mib", peak_rss_bytes() / MIB)
    return out


def _p50(fn: Callable[[Any], object], inputs: Sequence[Any]) -> float:
    return LatencyStats.from_seconds(time_calls(fn, inputs)).p50_ms


def _no_encoder() -> SentenceEncoder:
    raise RuntimeError("the raw keyword arm never embeds")


def _raw(job: ScaleJob, workdir: Path) -> dict[str, float]:
    import faiss

    from bench.systems.tantivy_raw import TantivySystem

    corpus = make_corpus(job.n_docs, job.seed)
    texts = queries(corpus, job.n_queries)
    out: dict[str, float] = {}

    docs = corpus.documents()
    tantivy_system = TantivySystem(SystemContext(workdir, job.model, _no_encoder))
    start = time.perf_counter()
    tantivy_system.index(docs, None)
    out["keyword_ingest_docs_per_s"] = job.n_docs / (time.perf_counter() - start)
    for text in WARMUP_QUERIES:
        tantivy_system.search(text, 10)
    out["keyword_p50_ms"] = _p50(lambda q: tantivy_system.search(q, 10), texts)
    tantivy_system.close()
    del docs

    matrix = vectors(corpus)
    probes = query_vectors(job.n_queries, job.seed)
    dim = int(matrix.shape[1])
    flat = faiss.IndexFlatIP(dim)
    start = time.perf_counter()
    flat.add(matrix)
    out["flat_ingest_docs_per_s"] = job.n_docs / (time.perf_counter() - start)
    out["flat_p50_ms"] = _p50(lambda v: flat.search(v[None, :], 10), list(probes))
    _scores, truth = flat.search(probes, 10)
    flat.reset()

    hnsw = faiss.IndexHNSWFlat(dim, job.hnsw_m, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = job.hnsw_ef_construction
    start = time.perf_counter()
    hnsw.add(matrix)
    out["hnsw_ingest_docs_per_s"] = job.n_docs / (time.perf_counter() - start)
    for i, ef in enumerate(job.hnsw_ef_search):
        hnsw.hnsw.efSearch = ef
        suffix = "" if i == 0 else f"_ef{ef}"
        out[f"hnsw{suffix}_p50_ms"] = _p50(lambda v: hnsw.search(v[None, :], 10), list(probes))
        _scores, found = hnsw.search(probes, 10)
        out[f"hnsw{suffix}_recall_at_10"] = recall_at_k(truth, found)
    return out


def recall_at_k(truth: npt.NDArray[np.int64], found: npt.NDArray[np.int64]) -> float:
    """Mean fraction of each exact top-k row that the approximate row also holds."""
    if truth.shape != found.shape or truth.size == 0:
        raise ValueError("truth and found must be non-empty arrays of the same shape")
    hits = sum(len(set(t[t >= 0]) & set(f[f >= 0])) for t, f in zip(truth, found, strict=True))
    return hits / truth.size


def _searcher(system: Any) -> Callable[[str], object]:
    return lambda query: system.search(query, 10)


def _tandem(job: ScaleJob, workdir: Path) -> dict[str, float]:
    """Keyword corpus, then hybrid corpus, each closed (the close saves the vector
    index); peak RSS is read then, before bench loads its own encoder. The hybrid corpus
    is reopened (timed: a restart) and searched in blocks alternating with the query
    embedding alone."""
    corpus = make_corpus(job.n_docs, job.seed)
    texts = queries(corpus, job.n_queries)
    docs = corpus.documents()
    out: dict[str, float] = {}
    _open_tandem(job, workdir, docs, None, texts, out).close()
    _open_tandem(job, workdir, docs, vectors(corpus), texts, out).close()
    out["tandem_peak_rss_mib"] = peak_rss_bytes() / MIB  # closing saved the index
    del docs
    start = time.perf_counter()
    hybrid = _reopen_tandem(workdir / "tandem_hybrid")
    hybrid.search(texts[0], 10)
    out["tandem_hybrid_reopen_s"] = time.perf_counter() - start
    encoder = _floor_encoder(job.model)
    for text in WARMUP_QUERIES:
        encoder.encode_query(text)
    searches, embeds = time_interleaved(_searcher(hybrid), encoder.encode_query, texts)
    hybrid.close()
    out["interleaved_hybrid_p50_ms"] = LatencyStats.from_seconds(searches).p50_ms
    out["embed_p50_ms"] = LatencyStats.from_seconds(embeds).p50_ms
    return out


def _open_tandem(
    job: ScaleJob,
    workdir: Path,
    docs: list[BenchDocument],
    matrix: npt.NDArray[np.float32] | None,
    texts: list[str],
    out: dict[str, float],
) -> Any:
    """Index one Tandem corpus (hybrid when ``matrix`` is given), record its ingest rate,
    first-search time and p50 into ``out``, and return it still open."""
    from bench.systems.tandem import TandemSystem

    label = "tandem_keyword" if matrix is None else "tandem_hybrid"
    system = TandemSystem(
        SystemContext(workdir / label, job.model, _no_encoder), hybrid=matrix is not None
    )
    start = time.perf_counter()
    system.index(docs, matrix)
    out[f"{label}_ingest_docs_per_s"] = job.n_docs / (time.perf_counter() - start)
    start = time.perf_counter()
    for text in WARMUP_QUERIES:
        system.search(text, 10)
    out[f"{label}_first_queries_s"] = time.perf_counter() - start
    out[f"{label}_p50_ms"] = _p50(_searcher(system), texts)
    return system


class _ReopenedCorpus:
    """An existing Tandem corpus opened again (what a restart costs at this size)."""

    def __init__(self, path: Path) -> None:
        from bench.systems.tandem import CORPUS_NAME, engine_api

        self._engine = engine_api().SearchEngine(str(path))
        self._corpus = self._engine.corpus(CORPUS_NAME)

    def search(self, query: str, k: int) -> list[str]:
        return [hit.source_id for hit in self._corpus.search(query, top_k=k)]

    def close(self) -> None:
        self._engine.close()


def _reopen_tandem(workdir: Path) -> _ReopenedCorpus:
    return _ReopenedCorpus(workdir / "tandem")


def _floor_encoder(model: str) -> SentenceEncoder:
    """The ONNX query path the main benchmark's floor uses, torch if it cannot load."""
    onnx = SentenceEncoder(model, EncoderBackend.ONNX, onnx_cache=DEFAULT_CACHE_DIR / "onnx")
    try:
        return onnx.load()
    except BenchError:
        return SentenceEncoder(model).load()
