"""Fault runs of ``python -m bench cluster``: SIGKILL a shard's process mid-work.

- During a search loop: searches keep answering (errors counted — the target is 0), the
  outage shows in ``tandem_shards_up`` (sampled by scraping the coordinator's registry),
  and after Ray restarts the actor every document is there again.
- During an ingest (Ray Data, precomputed vectors from Parquet): the write to the dead
  shard is sent again once it is back; every input document must end up stored with its
  vector (``lost_documents`` — the target is 0).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from engine import CorpusConfig, Document, SentenceTransformerEmbedding
from engine.cluster import ShardedCorpus
from engine.cluster.ingest import ingest

_SAMPLE_S = 0.25


def _kill(corpus: ShardedCorpus, index: int) -> int:
    info = corpus.shard_info()[index]
    if info is None:
        raise RuntimeError(f"shard {index} did not answer before the kill")
    os.kill(info.pid, signal.SIGKILL)
    return info.pid


def _up(corpus: ShardedCorpus) -> float:
    value = corpus.registry.get_sample_value("tandem_shards_up", {"corpus": corpus.name})
    return -1.0 if value is None else value


def search_loop_with_kill(
    corpus: ShardedCorpus, texts: Sequence[str], seconds: float
) -> dict[str, Any]:
    """Search in a loop for ``seconds`` (> 0) after SIGKILLing shard 1 two seconds in
    (the corpus needs at least two shards: killing the only one stops every search)."""
    if corpus.shards < 2:
        raise ValueError(f"the search-loop fault needs at least 2 shards, got {corpus.shards}")
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds}")
    before = len(corpus)
    errors: list[str] = []
    searches = 0
    empty = 0
    stop = threading.Event()

    def loop() -> None:
        nonlocal searches, empty
        i = 0
        while not stop.is_set():
            try:
                if not corpus.search(texts[i % len(texts)], top_k=10):
                    empty += 1
                searches += 1
            except Exception as exc:  # counted: the target is zero
                errors.append(type(exc).__name__)
            i += 1

    # A daemon, stopped and joined on every path: an error below must not leave it
    # searching (and the interpreter waiting for it) forever.
    worker = threading.Thread(target=loop, name="bench-search-loop", daemon=True)
    worker.start()
    samples: list[tuple[float, float]] = []
    try:
        time.sleep(2.0)
        killed_at = time.monotonic()
        _kill(corpus, 1)
        while True:  # at least one sample: seconds > 0
            samples.append((time.monotonic() - killed_at, _up(corpus)))
            if time.monotonic() - killed_at >= seconds:
                break
            time.sleep(_SAMPLE_S)
    finally:
        stop.set()
        worker.join(timeout=60)
    restarts = corpus.registry.get_sample_value(
        "tandem_shard_restarts_total", {"corpus": corpus.name}
    )
    down = [t for t, up in samples if up < corpus.shards]
    back = [t for t, up in samples if up == corpus.shards and down and t > down[0]]
    return {
        "search_errors": len(errors),
        "search_loop_searches": searches,
        "search_loop_empty_answers": empty,
        "search_loop_shards_up_min": min(up for _, up in samples),
        "search_loop_restarts_seen": restarts,
        "search_loop_outage_s": round(back[0] - down[0], 2) if down and back else None,
        "search_loop_documents_before": before,
        "search_loop_documents_after": len(corpus),
    }


def ingest_with_kill(
    root: Path, docs: Sequence[Document], matrix: np.ndarray, shards: int, model: str
) -> dict[str, Any]:
    """Ingest every document (vectors precomputed, from Parquet) into a fresh sharded
    corpus; SIGKILL shard 2 once a third is written; count what is missing after."""
    source = root / "fault-ingest.parquet"
    table = pa.table(
        {
            "id": [d.id for d in docs],
            "title": [d.title for d in docs],
            "text": [d.text for d in docs],
            "vector": pa.array(list(matrix), type=pa.list_(pa.float32())),
        }
    )
    pq.write_table(table, source, row_group_size=512)
    corpus = ShardedCorpus.create(
        root / "fault-ingest",
        CorpusConfig(name="fi", embedder=SentenceTransformerEmbedding(model=model)),
        shards,
    )
    killed: list[int] = []
    lowest = [float(shards)]
    stop = threading.Event()

    def on_progress(written: int) -> None:
        if not killed and written >= len(docs) // 3:
            killed.append(_kill(corpus, 2 % shards))

    def sample() -> None:
        while not stop.is_set():
            lowest[0] = min(lowest[0], _up(corpus))
            time.sleep(_SAMPLE_S)

    sampler = threading.Thread(target=sample, name="bench-shards-up", daemon=True)
    sampler.start()
    try:
        report = ingest(
            corpus,
            source,
            batch_size=256,
            vector_column="vector",
            embedding_model=model,
            progress=False,
            on_progress=on_progress,
        )
        stop.set()
        sampler.join(timeout=30)
        lowest[0] = min(lowest[0], _up(corpus))
        restarts = corpus.registry.get_sample_value(
            "tandem_shard_restarts_total", {"corpus": corpus.name}
        )
        state = corpus._writer._content_state([d.id for d in docs])
        stored = sum(1 for _, has_vector in state.values() if has_vector)
    finally:
        stop.set()
        sampler.join(timeout=30)
        corpus.close()
    return {
        "fault_ingest_docs": len(docs),
        "fault_ingest_written": report.written,
        "fault_ingest_seconds": round(report.seconds, 1),
        "fault_ingest_killed": bool(killed),
        "fault_ingest_shards_up_min": lowest[0],
        "fault_ingest_restarts_seen": restarts,
        "lost_documents": len(docs) - stored,
    }
