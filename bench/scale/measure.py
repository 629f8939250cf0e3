"""The stages of one scale point, each run in its own process (so peak RSS is its own).

``raw``: raw tantivy (keyword arm: ingest, p50/p95), then the dense arm through the
engine's vector index (``bench.scale.dense_stage``: exact path, searches during the
background graph build, HNSW float32 and SQ8 recall@10 against exact search on the same
vectors, p50/p95). ``dense-reopen``: one saved vector index (float32 or SQ8) reopened in
a fresh process: first answer, p50/p95, peak memory. ``tandem``: Tandem keyword and
hybrid corpora through the public API (``bench.scale.tandem_stage``). ``reopen``: the
hybrid corpus restarted in a fresh process, then its searches timed in blocks
alternating with the query embedding alone (ONNX floor path) for the hybrid overhead.

Every stage records the load average when it starts and ends: on a shared machine the
latencies are only as good as the load they were taken under.
"""

from __future__ import annotations

import enum
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.encoder import EncoderBackend, SentenceEncoder
from bench.errors import BenchError
from bench.runner import WARMUP_QUERIES
from bench.scale import dense_stage, tandem_stage
from bench.scale.anchors import DEFAULT_DATA_DIR
from bench.scale.dense_stage import recall_at_k
from bench.scale.source import VectorSource, vector_source
from bench.scale.synth import make_corpus, queries
from bench.systems.base import SystemContext
from bench.timing import LatencyStats, peak_rss_bytes, time_calls, time_interleaved
from bench.vector_cache import DEFAULT_CACHE_DIR

__all__ = ["ScaleJob", "Stage", "recall_at_k", "run_stage"]

MIB = 1024.0 * 1024.0


class Stage(enum.StrEnum):
    RAW = "raw"
    DENSE_REOPEN = "dense-reopen"
    TANDEM = "tandem"
    REOPEN = "reopen"


@dataclass(frozen=True, slots=True)
class ScaleJob:
    n_docs: int
    seed: int
    n_queries: int
    model: str
    stage: Stage
    workdir: str = ""  # shared by the stages of one scale point ("": a private temp dir)
    realistic: bool = True
    data_dir: str | None = str(DEFAULT_DATA_DIR)
    hnsw_ef_search: tuple[int, ...] = (64, 256)  # besides the engine's own efSearch
    storage: str = "float32"  # which saved index ``dense-reopen`` opens
    keyword_corpus: bool = True  # tandem: also a keyword-only corpus (its ingest and p50)
    graph_from_tandem: bool = False  # raw: load the Tandem corpus's saved graph, build none

    @property
    def label(self) -> str:
        """The stage's name in result keys (``dense-reopen`` names its index too)."""
        if self.stage is Stage.DENSE_REOPEN:
            return f"{self.stage.value}-{self.storage}"
        return self.stage.value


def run_stage(job: ScaleJob) -> dict[str, float]:
    """Worker entry point: the stage's measurements, names prefixed by what they measure."""
    out: dict[str, float] = {f"{job.label}_load_avg_start": os.getloadavg()[0]}
    if job.workdir:
        out.update(_run(job, Path(job.workdir)))
    else:
        with tempfile.TemporaryDirectory(prefix=f"bench-scale-{job.stage.value}-") as tmp:
            out.update(_run(job, Path(tmp)))
    out[f"{job.label}_load_avg_end"] = os.getloadavg()[0]
    out.setdefault(f"{job.label}_peak_rss_mib", peak_rss_bytes() / MIB)
    return out


def _run(job: ScaleJob, workdir: Path) -> dict[str, float]:
    stages: dict[Stage, Callable[[ScaleJob, Path], dict[str, float]]] = {
        Stage.RAW: _raw,
        Stage.DENSE_REOPEN: _dense_reopen,
        Stage.TANDEM: _tandem,
        Stage.REOPEN: _reopen,
    }
    return stages[job.stage](job, workdir)


def _source(job: ScaleJob, workdir: Path) -> VectorSource:
    data_dir = None if job.data_dir is None else Path(job.data_dir)
    return vector_source(
        job.n_docs, job.seed, job.model, job.realistic, data_dir, workdir / "noise.npz"
    )


def _texts(job: ScaleJob) -> list[str]:
    return queries(make_corpus(job.n_docs, job.seed), job.n_queries)


def _no_encoder() -> SentenceEncoder:
    raise RuntimeError("the raw keyword arm never embeds")


def _raw(job: ScaleJob, workdir: Path) -> dict[str, float]:
    from bench.systems.tantivy_raw import TantivySystem

    corpus = make_corpus(job.n_docs, job.seed)
    texts = queries(corpus, job.n_queries)
    out: dict[str, float] = {"realistic_vectors": float(job.realistic)}
    docs = corpus.documents()
    tantivy_system = TantivySystem(SystemContext(workdir / "raw", job.model, _no_encoder))
    start = time.perf_counter()
    tantivy_system.index(docs, None)
    out["keyword_ingest_docs_per_s"] = job.n_docs / (time.perf_counter() - start)
    del docs
    for text in WARMUP_QUERIES:
        tantivy_system.search(text, 10)
    stats = LatencyStats.from_seconds(time_calls(lambda q: tantivy_system.search(q, 10), texts))
    out["keyword_p50_ms"], out["keyword_p95_ms"] = stats.p50_ms, stats.p95_ms
    tantivy_system.close()
    source = _source(job, workdir)
    graph = tandem_stage.saved_vector_index(workdir) if job.graph_from_tandem else None
    out.update(dense_stage.measure_dense(source, job.n_queries, job.hnsw_ef_search, workdir, graph))
    return out


def _dense_reopen(job: ScaleJob, workdir: Path) -> dict[str, float]:
    source = _source(job, workdir)
    return dense_stage.measure_dense_reopen(source, job.n_queries, job.storage, workdir)


def _tandem(job: ScaleJob, workdir: Path) -> dict[str, float]:
    source = _source(job, workdir)
    texts = _texts(job)
    out: dict[str, float] = {}
    if job.keyword_corpus:
        out.update(tandem_stage.ingest(source, job.model, texts, workdir, hybrid=False))
    out.update(tandem_stage.ingest(source, job.model, texts, workdir, hybrid=True))
    return out


def _reopen(job: ScaleJob, workdir: Path) -> dict[str, float]:
    texts = _texts(job)
    out = tandem_stage.reopen(texts, workdir, lambda: peak_rss_bytes() / MIB)
    api = tandem_stage._api()
    with api.SearchEngine(str(tandem_stage.corpus_dir(workdir, "tandem_hybrid"))) as engine:
        corpus = engine.corpus(tandem_stage.CORPUS)
        corpus.search(texts[0], top_k=10)
        encoder = _floor_encoder(job.model)
        for text in WARMUP_QUERIES:
            encoder.encode_query(text)
        searches, embeds = time_interleaved(
            lambda text: corpus.search(text, top_k=10), encoder.encode_query, texts
        )
    out["interleaved_hybrid_p50_ms"] = LatencyStats.from_seconds(searches).p50_ms
    out["embed_p50_ms"] = LatencyStats.from_seconds(embeds).p50_ms
    return out


def _floor_encoder(model: str) -> SentenceEncoder:
    """The ONNX query path the main benchmark's floor uses, torch if it cannot load."""
    onnx = SentenceEncoder(model, EncoderBackend.ONNX, onnx_cache=DEFAULT_CACHE_DIR / "onnx")
    try:
        return onnx.load()
    except BenchError:
        return SentenceEncoder(model).load()


def stages_for(tandem: bool) -> Sequence[tuple[Stage, dict[str, Any]]]:
    """The stages of one scale point, in order, with their job overrides. With Tandem,
    its corpus comes first and the raw dense stage measures the graph it saved."""
    dense: list[tuple[Stage, dict[str, Any]]] = [
        (Stage.RAW, {"graph_from_tandem": tandem}),
        (Stage.DENSE_REOPEN, {"storage": "float32"}),
        (Stage.DENSE_REOPEN, {"storage": "sq8"}),
    ]
    if tandem:
        return [(Stage.TANDEM, {}), (Stage.REOPEN, {}), *dense]
    return dense
