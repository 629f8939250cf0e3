"""Runs one system over one corpus and measures it: ingest, latency, quality, memory, disk.

The order is fixed so that no system sees a query twice before it is timed: index →
warm-up on synthetic queries (loads lazy models, not counted) → latency pass over every
query at ``k_latency``, one at a time → quality pass at ``k_quality`` → peak RSS → for
systems that use the model, searches and the query embedding alone timed in alternating
blocks in the same process (the ratio to the embedding floor). Tandem hybrid also
measures ingest with its own encoding on a subset against the raw encoder on that subset.

Ingest is reported twice. Index-only (``ingest_docs_per_s``): the time ``index`` takes,
vector systems being handed the cached corpus vectors. End-to-end, embedding included
(``ingest_e2e_docs_per_s``, the headline): every vector system — Tandem hybrid as much
as a peer — is charged its index time plus the corpus's embedding time at the raw
encoder's throughput, measured by the parent on ``encode_subset`` documents spread over the
corpus (every system embeds with the same sentence-transformers model, at its default
batch of 32); keyword systems, index-only. Tandem hybrid's own ``Corpus.add`` path
(embedding and indexing) is also timed against the raw encoder on the same sample,
interleaved in its process, and reported apart (``ingest_over_encoder``): it says what
Tandem's own embedding costs against the raw encoder, not a rate to compare peers with.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from bench.dataset import BeirDataset, BenchDocument, load_for_run
from bench.encoder import EncoderBackend, SentenceEncoder
from bench.errors import SystemUnavailable
from bench.quality import evaluate, rounded
from bench.results import Status, SystemResult, errored, skipped
from bench.systems.base import BenchSystem, SystemContext, SystemName
from bench.systems.registry import SPECS, build
from bench.timing import (
    LatencyStats,
    current_rss_bytes,
    peak_rss_bytes,
    time_calls,
    time_interleaved,
)
from bench.vector_cache import VectorCache

logger = logging.getLogger(__name__)

MIB = 1024.0 * 1024.0
WARMUP_QUERIES = (
    "warm up the index",
    "loading models before timing",
    "a third synthetic query",
)


@dataclass(frozen=True, slots=True)
class SystemJob:
    """Everything a (possibly separate) process needs to run one system on one corpus."""

    data_dir: Path
    corpus: str
    system: SystemName
    model: str
    backend: EncoderBackend
    cache_dir: Path
    k_quality: int = 100
    k_latency: int = 10
    encode_subset: int = 500
    isolated: bool = True
    encoder_docs_per_s: float | None = None
    split: str | None = None
    drop_titles: bool = False


def run_job(job: SystemJob) -> SystemResult:
    """Entry point of a worker process; never raises (failures become ERROR results)."""
    try:
        dataset = load_for_run(job.data_dir, job.split, job.drop_titles)
        with tempfile.TemporaryDirectory(prefix=f"bench-{job.system.value}-") as tmp:
            return _measure(job, dataset, Path(tmp))
    except SystemUnavailable as exc:
        return skipped(job.corpus, job.system.value, str(exc))
    except Exception as exc:
        logger.exception("system %s failed on %s", job.system.value, job.corpus)
        return errored(job.corpus, job.system.value, f"{type(exc).__name__}: {exc}")


def _measure(job: SystemJob, dataset: BeirDataset, workdir: Path) -> SystemResult:
    encoder = SentenceEncoder(job.model, job.backend, onnx_cache=job.cache_dir / "onnx")
    ctx = SystemContext(workdir=workdir / "main", model=job.model, encoder=lambda: encoder)
    system = build(job.system, ctx)
    vectors = None
    if system.uses_vectors:
        vectors = VectorCache(job.cache_dir).load(job.model, dataset)
        if vectors is None:
            raise RuntimeError("corpus vectors missing from the cache (parent computes them)")
    if SPECS[job.system].embeds_queries:
        encoder.load()  # model load stays out of ingest and latency figures
    system.prepare()  # its libraries' imports and its own model loads, likewise
    load_before = os.getloadavg()[0]
    rss_before = current_rss_bytes()

    start = time.perf_counter()
    system.index(dataset.documents, vectors)
    ingest_s = time.perf_counter() - start

    start = time.perf_counter()
    for query in WARMUP_QUERIES:  # includes any index work a system defers to first search
        system.search(query, job.k_latency)
    warmup_s = time.perf_counter() - start
    texts = [q.text for q in dataset.queries]
    latency = LatencyStats.from_seconds(
        time_calls(lambda q: system.search(q, job.k_latency), texts)
    )
    run = {q.query_id: dataset.ranking(q, system.search, job.k_quality) for q in dataset.queries}
    quality = evaluate(dataset.qrels, run)
    disk = system.disk_bytes()
    rss_after = current_rss_bytes()
    peak = peak_rss_bytes() if job.isolated else None
    extra = {"load_average_1m": load_before, "warmup_s": warmup_s}
    if SPECS[job.system].uses_model:
        extra.update(_interleaved_with_embedding(system, encoder.load(), texts, job.k_latency))
    if job.system is SystemName.TANDEM_KEYWORD:
        extra.update(_interleaved_with_tantivy(system, ctx, dataset, texts, job.k_latency))
    system.close()

    if job.system in TANDEM_HYBRIDS:
        extra.update(_own_encoding_ingest(job, dataset, workdir, encoder))
    n_docs = len(dataset.documents)
    e2e = _end_to_end_docs_per_s(job, n_docs, ingest_s)
    return SystemResult(
        corpus=job.corpus,
        system=job.system.value,
        status=Status.OK,
        n_docs=n_docs,
        n_queries=len(texts),
        ndcg_at_10=quality.ndcg_at_10,
        recall_at_100=quality.recall_at_100,
        mrr_at_10=quality.mrr_at_10,
        ingest_s=ingest_s,
        ingest_docs_per_s=n_docs / ingest_s if ingest_s > 0 else None,
        ingest_e2e_docs_per_s=e2e,
        p50_ms=latency.p50_ms,
        p95_ms=latency.p95_ms,
        mean_ms=latency.mean_ms,
        qps=latency.qps,
        peak_rss_mib=peak / MIB if peak is not None else None,
        rss_delta_mib=(rss_after - rss_before) / MIB,
        disk_mib=disk / MIB,
        extra=extra,
        per_query_ndcg10=rounded(quality.per_query_ndcg_at_10),
    )


TANDEM_HYBRIDS = frozenset(
    {SystemName.TANDEM_HYBRID, SystemName.TANDEM_HYBRID_ZSCORE, SystemName.TANDEM_HYBRID_WINDOWS}
)
"""Tandem corpora with an embedder: they embed their own documents on ``Corpus.add``."""


def _end_to_end_docs_per_s(job: SystemJob, n_docs: int, ingest_s: float) -> float | None:
    """Ingest throughput with embedding included (see the module docstring): one formula
    for every vector system, Tandem's included. (Until a review found it, Tandem's was the
    encoder rate times its own-encoding ratio, a second formula that read it ahead of
    every peer by up to a fifth.)"""
    if not SPECS[job.system].uses_vectors:
        return n_docs / ingest_s if ingest_s > 0 else None
    if not job.encoder_docs_per_s:
        return None
    return n_docs / (ingest_s + n_docs / job.encoder_docs_per_s)


def _interleaved_with_embedding(
    system: BenchSystem, encoder: SentenceEncoder, texts: list[str], k: int
) -> dict[str, float]:
    """Search and query embedding alone, interleaved in blocks in this process (after the
    peak-memory reading, so the extra encoder never counts against the system)."""
    for text in WARMUP_QUERIES:
        encoder.encode_query(text)
    searches, embeds = time_interleaved(lambda q: system.search(q, k), encoder.encode_query, texts)
    return _paired_p50s(searches, embeds, "embedding")


KEYWORD_PAIR_PASSES = 6
"""Passes over the queries when Tandem's keyword search is timed against raw tantivy (a
few seconds: both answer in about a millisecond)."""


def _interleaved_with_tantivy(
    system: BenchSystem,
    ctx: SystemContext,
    dataset: BeirDataset,
    texts: list[str],
    k: int,
) -> dict[str, float]:
    """Tandem's keyword search and raw tantivy over the same documents, interleaved in
    blocks in this process (after the memory and disk readings), ``KEYWORD_PAIR_PASSES``
    times over the queries, the lead swapping each pass. Two 1–2 ms p50s taken in
    separate processes drift apart by more than the ratio's target allows (the same
    revision read 1.00 and 2.24 on Cranfield in two runs); paired, both see the same
    machine; one pass still moved Cranfield's ratio 1.32 → 1.58 between two runs."""
    raw = build(SystemName.TANTIVY, replace(ctx, workdir=ctx.workdir.parent / "tantivy-pair"))
    try:
        raw.index(dataset.documents, None)
        for query in WARMUP_QUERIES:
            raw.search(query, k)
        ours, theirs = time_interleaved(
            lambda q: system.search(q, k),
            lambda q: raw.search(q, k),
            texts,
            passes=KEYWORD_PAIR_PASSES,
        )
    finally:
        raw.close()
    return _paired_p50s(ours, theirs, "tantivy")


def _paired_p50s(ours: list[float], theirs: list[float], other: str) -> dict[str, float]:
    """The p50s of an interleaved pass and their ratio: ``interleaved_p50_ms``,
    ``interleaved_{other}_p50_ms`` and ``over_{other}``."""
    ours_p50 = LatencyStats.from_seconds(ours).p50_ms
    theirs_p50 = LatencyStats.from_seconds(theirs).p50_ms
    return {
        "interleaved_p50_ms": ours_p50,
        f"interleaved_{other}_p50_ms": theirs_p50,
        f"over_{other}": ours_p50 / theirs_p50,
    }


OWN_ENCODING_ROUNDS = 4
"""Chunks the ingest sample is cut into, each embedded by the raw encoder and ingested by
Tandem back to back, the lead swapping each chunk (an even number: each side leads as
often): the two sides then share the machine's moments (one timed after the other once
read 0.99 and 1.22 on two corpora of one run)."""


def _own_encoding_ingest(
    job: SystemJob, dataset: BeirDataset, workdir: Path, encoder: SentenceEncoder
) -> dict[str, float]:
    """Tandem hybrid ingest with its own encoding vs the raw encoder, on the same subset,
    interleaved in ``OWN_ENCODING_ROUNDS`` chunks (each side sees every chunk once).

    The raw encoder is plain sentence-transformers (torch, batch 32: its default and
    Tandem's). Both sides warm their model on a handful of documents first, so the
    figures compare steady-state throughput rather than model loading.
    """
    from bench.systems.tandem import tandem_for

    subset = dataset.spread_sample(max(1, job.encode_subset))
    warm = [
        BenchDocument(doc_id=f"warmup-{d.doc_id}", title=d.title, text=d.text)
        for d in dataset.documents[:8]
    ]
    raw = encoder if encoder.backend is EncoderBackend.TORCH else SentenceEncoder(job.model)
    ctx = SystemContext(workdir=workdir / "own", model=job.model, encoder=lambda: raw)
    tandem = tandem_for(ctx, job.system)
    raw.encode([d.full_text for d in warm])
    tandem.index_with_own_encoding(warm)
    raw_s = own_s = 0.0
    try:
        for n in range(OWN_ENCODING_ROUNDS):
            chunk = subset[n::OWN_ENCODING_ROUNDS]
            if not chunk:
                continue
            texts = [d.full_text for d in chunk]
            for side in ("raw", "own") if n % 2 == 0 else ("own", "raw"):
                start = time.perf_counter()
                if side == "raw":
                    raw.encode(texts)
                    raw_s += time.perf_counter() - start
                else:
                    tandem.index_with_own_encoding(chunk)
                    own_s += time.perf_counter() - start
    finally:
        tandem.close()
    return {
        "encode_subset_docs": float(len(subset)),
        "raw_encoder_docs_per_s": len(subset) / raw_s,
        "own_encoding_ingest_docs_per_s": len(subset) / own_s,
        "ingest_over_encoder": raw_s / own_s,
    }
