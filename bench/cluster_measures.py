"""Throughput and capacity measures of ``python -m bench cluster`` (see ``bench.cluster``)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import ray

from bench.dataset import BeirDataset
from bench.scale.synth import iter_documents, make_corpus, queries, query_vectors, vectors
from bench.timing import LatencyStats, dir_size_bytes
from engine import CorpusConfig, Document
from engine.cluster import ShardedCorpus
from engine.cluster.embedding import EmbeddingWorker
from engine.cluster.ingest import ingest
from engine.config import SentenceTransformerEmbedding

logger = logging.getLogger(__name__)

_EMBED_BATCH = 32
GRAPH_TIMEOUT_S = 1_800.0  # the shard's graph build after the capacity load (a few minutes)
GRAPH_POLL_S = 2.0  # ``stats()`` walks the shard's directory: not asked more often


def wait_until(
    done: Callable[[], bool],
    timeout_s: float,
    poll_s: float = GRAPH_POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """Ask ``done()`` every ``poll_s`` seconds until it is true (``True``) or ``timeout_s``
    has passed (``False``)."""
    deadline = clock() + timeout_s
    while not done():
        if clock() >= deadline:
            return False
        sleep(poll_s)
    return True


def embed_scaling(model: str, dataset: BeirDataset, n_docs: int) -> dict[str, float]:
    """Documents/s of one and of two embedding actors (one CPU each) on the same texts.

    Models are loaded before the clock starts; the two settings run in ABBA order so a
    change of machine load mid-run weighs on both.
    """
    texts = [d.full_text for d in dataset.documents[:n_docs]]
    batches = [texts[i : i + _EMBED_BATCH] for i in range(0, len(texts), _EMBED_BATCH)]
    spec = SentenceTransformerEmbedding(model=model)
    worker: Any = ray.remote(num_cpus=1)(EmbeddingWorker)
    pool: list[Any] = [worker.remote(spec) for _ in range(2)]
    ray.get([w.warm_up.remote() for w in pool])
    rates: dict[int, list[float]] = {1: [], 2: []}
    cores: dict[int, list[float]] = {1: [], 2: []}  # CPU-seconds used in each phase
    walls: dict[int, list[float]] = {1: [], 2: []}
    for actors in (1, 2, 2, 1):
        cpu_before = ray.get([w.cpu_seconds.remote() for w in pool[:actors]])
        started = time.perf_counter()
        ray.get([pool[i % actors].embed.remote(b) for i, b in enumerate(batches)])
        wall = time.perf_counter() - started
        cpu_after = ray.get([w.cpu_seconds.remote() for w in pool[:actors]])
        rates[actors].append(len(texts) / wall)
        walls[actors].append(wall)
        cores[actors].append(sum(cpu_after) - sum(cpu_before))
    for handle in pool:
        ray.kill(handle)
    one, two = float(np.mean(rates[1])), float(np.mean(rates[2]))
    per_cpu = {n: len(texts) * len(cores[n]) / sum(cores[n]) for n in (1, 2)}
    got = {n: sum(cores[n]) / sum(walls[n]) for n in (1, 2)}
    return {
        "embed_docs": len(texts),
        "embed_docs_per_s_1_actor": round(one, 1),
        "embed_docs_per_s_2_actors": round(two, 1),
        "embed_scaling_2_actors": round(two / one, 3),
        # CPU-normalised: equal documents per CPU-second means the work splits without
        # loss, so throughput grows with the cores the machine actually gives.
        "embed_docs_per_cpu_s_1_actor": round(per_cpu[1], 1),
        "embed_docs_per_cpu_s_2_actors": round(per_cpu[2], 1),
        "embed_cores_used_1_actor": round(got[1], 2),
        "embed_cores_used_2_actors": round(got[2], 2),
    }


def end_to_end_ingest(
    root: Path, dataset: BeirDataset, shards: int, model: str, n_docs: int
) -> dict[str, Any]:
    """Ray Data ingest of ``n_docs`` documents from JSON Lines, embedded on two actors,
    into a fresh sharded corpus: documents/s over the whole job (start-up included)."""
    source = root / "ingest.jsonl"
    with open(source, "w", encoding="utf-8") as fh:
        for doc in dataset.documents[:n_docs]:
            fh.write(json.dumps({"_id": doc.doc_id, "title": doc.title, "text": doc.text}) + "\n")
    config = CorpusConfig(name="e2e", embedder=SentenceTransformerEmbedding(model=model))
    corpus = ShardedCorpus.create(root / "e2e", config, shards)
    try:
        report = ingest(corpus, source, embed_actors=2, batch_size=64, progress=False)
        stored = corpus.stats()
    finally:
        corpus.close()
    return {
        "ingest_docs": report.written,
        "ingest_seconds": round(report.seconds, 1),
        "ingest_docs_per_s": round(report.docs_per_s, 1),
        "ingest_vectors_stored": stored["vectors"],
    }


def shard_capacity(root: Path, n_docs: int, model: str) -> dict[str, Any]:
    """One shard holding ``n_docs`` synthetic documents (384-d random unit vectors): its
    process memory per document, its disk per document, and its query rate (keyword and
    vector windows for a query embedded elsewhere, one client).

    After the load it waits (up to ``GRAPH_TIMEOUT_S``) until the shard reports no vector
    graph pending, so memory and latency are those of the serving state:
    ``capacity_graph_ready`` says whether that happened (below 50,000 vectors no graph is
    due and it is true at once), ``capacity_graph_wait_s`` how long it took."""
    import psutil

    synth = make_corpus(n_docs, seed=13)
    docs = [Document(id=d.doc_id, title=d.title, text=d.text) for d in iter_documents(synth)]
    matrix = vectors(synth)
    corpus = ShardedCorpus.create(
        root / "capacity",
        CorpusConfig(name="cap", embedder=SentenceTransformerEmbedding(model=model)),
        1,
    )
    try:
        info = corpus.shard_info()[0]
        assert info is not None
        process = psutil.Process(info.pid)
        rss_empty = process.memory_info().rss
        started = time.perf_counter()
        for start in range(0, n_docs, 5_000):
            corpus.add(
                docs[start : start + 5_000],
                embeddings=matrix[start : start + 5_000],
                embedding_model=model,
                progress=False,
            )
        add_s = time.perf_counter() - started
        rss_added = process.memory_info().rss
        # Past the vector index's threshold (50,000) the shard builds its HNSW graph in
        # the background after the load; memory and searches are measured once it serves.
        waited = time.perf_counter()
        graph_ready = wait_until(
            lambda: not corpus.stats()["per_shard"][0]["vector_graph_pending"], GRAPH_TIMEOUT_S
        )
        graph_wait_s = time.perf_counter() - waited
        if not graph_ready:
            logger.warning(
                "capacity: the vector graph was still pending after %.0f s", graph_wait_s
            )
        handle = corpus._calls.handles[0]
        texts = queries(synth, 200)
        qvecs = query_vectors(200, seed=13)

        def both_windows(text: str, vec: np.ndarray) -> None:
            keyword = ray.get(handle.keyword_window.remote(text, 100, None, (), True, 10))
            ray.get(handle.vector_window.remote(text, vec, 100, None, (), 10, keyword.checked))

        started = time.perf_counter()
        both_windows(texts[0], qvecs[0])
        # One-off costs of the first call (the query path's first use in the actor); the
        # graph, if one is due, was built before (``capacity_graph_ready``).
        first_s = time.perf_counter() - started
        samples = []
        for text, vec in zip(texts, qvecs, strict=True):
            t0 = time.perf_counter()
            both_windows(text, vec)
            samples.append(time.perf_counter() - t0)
        stats = LatencyStats.from_seconds(samples)
        rss_full = process.memory_info().rss
        disk = dir_size_bytes(root / "capacity")
    finally:
        corpus.close()
    return {
        "capacity_docs": n_docs,
        "capacity_add_docs_per_s": round(n_docs / add_s, 1),
        "capacity_graph_ready": graph_ready,
        "capacity_graph_wait_s": round(graph_wait_s, 1),
        "capacity_first_search_s": round(first_s, 2),
        "capacity_shard_rss_empty_mb": round(rss_empty / 2**20, 1),
        "capacity_shard_rss_after_add_mb": round(rss_added / 2**20, 1),
        "capacity_shard_rss_mb": round(rss_full / 2**20, 1),
        "capacity_rss_bytes_per_doc": round((rss_full - rss_empty) / n_docs, 1),
        "capacity_disk_bytes_per_doc": round(disk / n_docs, 1),
        "capacity_windows_p50_ms": round(stats.p50_ms, 3),
        "capacity_windows_p95_ms": round(stats.p95_ms, 3),
        "capacity_windows_qps_one_client": round(stats.qps, 1),
    }
