"""Tandem through its public API: a keyword corpus and a hybrid corpus of the scale
point's documents, then (in a fresh process) a restart of the hybrid corpus.

Ingest streams documents and precomputed vectors in chunks, so the process holds what
the engine holds and nothing of the benchmark's; the ingest rate counts the time inside
``Corpus.add`` only (the chunks are generated between the calls, off the clock). After
the hybrid load, the corpus builds its HNSW graph in the background: hybrid searches
keep running meanwhile (the slowest is recorded) until ``stats()`` reports no graph
pending, then hybrid p50/p95 are taken and the corpus is closed (which saves the graph).
The ``reopen`` stage opens the saved corpus in a new process, times the first answer,
hybrid p50/p95, peak memory, and the hybrid search against the query embedding alone in
alternating blocks (the hybrid overhead, as in the main benchmark).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from bench.runner import WARMUP_QUERIES
from bench.scale import synth
from bench.scale.dense_stage import search_while
from bench.scale.source import VectorSource
from bench.timing import LatencyStats, current_rss_bytes, dir_size_bytes, time_calls

MIB = 2.0**20
ADD_BATCH = 10_000
GRAPH_POLL_S = 1.0  # how often the build wait asks ``stats()`` (it walks the directory)
CORPUS = "bench"

T = TypeVar("T")


def _api() -> Any:
    import engine

    return engine


def corpus_dir(workdir: Path, label: str) -> Path:
    return workdir / label


def saved_vector_index(workdir: Path) -> Path:
    """The hybrid corpus's saved vector index (graph included once the build finished)."""
    found = sorted(
        (corpus_dir(workdir, "tandem_hybrid") / "corpora" / CORPUS).rglob("vectors.faiss")
    )
    if len(found) != 1:
        raise RuntimeError(f"expected one vectors.faiss in the hybrid corpus, found {len(found)}")
    return found[0]


def _batches(source: VectorSource, with_vectors: bool) -> Iterator[tuple[list[Any], Any]]:
    api = _api()
    corpus = synth.make_corpus(source.n_docs, source.seed)
    docs = synth.iter_documents(corpus)
    chunks = source.chunks() if with_vectors else itertools.repeat(None)
    for chunk in chunks:
        size = synth.CHUNK if chunk is None else int(chunk.shape[0])
        batch = [
            api.Document(id=d.doc_id, title=d.title, text=d.text, url="")
            for d in itertools.islice(docs, size)
        ]
        if not batch:
            return
        for start in range(0, len(batch), ADD_BATCH):
            vectors = None if chunk is None else chunk[start : start + ADD_BATCH]
            yield batch[start : start + ADD_BATCH], vectors


def timed_calls(
    call: Callable[[T], object],
    items: Iterable[T],
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds spent inside ``call(item)`` for every item; producing the items (however
    slow the iterator) is not counted."""
    spent = 0.0
    for item in items:
        start = clock()
        call(item)
        spent += clock() - start
    return spent


def _searcher(corpus: Any) -> Callable[[str], object]:
    return lambda text: corpus.search(text, top_k=10)


def ingest(
    source: VectorSource, model: str, texts: list[str], workdir: Path, hybrid: bool
) -> dict[str, float]:
    api = _api()
    label = "tandem_hybrid" if hybrid else "tandem_keyword"
    out: dict[str, float] = {}
    with api.SearchEngine(str(corpus_dir(workdir, label))) as engine:
        config = api.CorpusConfig(name=CORPUS, embedder=model if hybrid else None)
        corpus = engine.create_corpus(config)
        # Only the ``add`` calls are timed: the batches are generated (vocabulary, Zipfian
        # text, Documents, realistic vectors) between them, off the clock, as the raw
        # tantivy arm builds its documents before its timer starts.
        adding = timed_calls(
            lambda batch: corpus.add(batch[0], embeddings=batch[1], progress=False),
            _batches(source, hybrid),
        )
        out[f"{label}_ingest_docs_per_s"] = source.n_docs / adding
        search = _searcher(corpus)
        if hybrid:
            out.update(_wait_for_graph(corpus, search, texts))
        for text in WARMUP_QUERIES:
            search(text)
        stats = LatencyStats.from_seconds(time_calls(search, texts))
        out[f"{label}_p50_ms"], out[f"{label}_p95_ms"] = stats.p50_ms, stats.p95_ms
        start = time.perf_counter()
    out[f"{label}_close_s"] = time.perf_counter() - start  # saves the vector index
    if hybrid:
        out["tantivy_mib"] = (
            dir_size_bytes(corpus_dir(workdir, label) / "corpora" / CORPUS / "tantivy") / MIB
        )
        out["raw_vectors_mib"] = source.n_docs * source.dimension * 4 / MIB
    return out


def _wait_for_graph(
    corpus: Any, search: Callable[[str], object], texts: list[str]
) -> dict[str, float]:
    """Hybrid searches, paced as in the dense stage, until the corpus reports its graph
    serving (``stats()`` is asked once a second: it walks the corpus directory)."""
    start = time.perf_counter()
    state = {"pending": True, "polled": 0.0}

    def busy() -> bool:
        now = time.perf_counter()
        if now - state["polled"] >= GRAPH_POLL_S:
            state["polled"] = now
            state["pending"] = bool(corpus.stats()["vector_graph_pending"])
        return bool(state["pending"])

    samples = search_while(lambda i: search(texts[i % len(texts)]), busy)
    out = {"tandem_graph_ready_s": time.perf_counter() - start}
    out["tandem_searches_during_build"] = float(len(samples))
    if samples:
        out["tandem_slowest_hybrid_during_build_s"] = max(samples)
        out["tandem_hybrid_during_build_p50_ms"] = LatencyStats.from_seconds(samples).p50_ms
    return out


def reopen(texts: list[str], workdir: Path, peak: Callable[[], float]) -> dict[str, float]:
    """A restart: open the saved hybrid corpus, first answer, p50/p95, memory."""
    api = _api()
    out: dict[str, float] = {}
    start = time.perf_counter()
    engine = api.SearchEngine(str(corpus_dir(workdir, "tandem_hybrid")))
    corpus = engine.corpus(CORPUS)
    out["reopen_open_s"] = time.perf_counter() - start
    out["reopen_rss_after_open_mib"] = current_rss_bytes() / MIB
    corpus.search(texts[0], top_k=10)
    out["tandem_hybrid_reopen_s"] = time.perf_counter() - start
    search = _searcher(corpus)
    stats = LatencyStats.from_seconds(time_calls(search, texts))
    out["reopened_hybrid_p50_ms"], out["reopened_hybrid_p95_ms"] = stats.p50_ms, stats.p95_ms
    out["reopen_peak_rss_mib"] = peak()
    out["reopen_stats_graph_pending"] = float(bool(corpus.stats()["vector_graph_pending"]))
    engine.close()
    return out
