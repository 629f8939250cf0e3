"""The write path of a sharded corpus: embed once in the coordinator, route, send.

Documents arrive validated. Those a shard already holds with the same title and text and
a vector keep it (one look-up per shard, no model call); the rest are embedded here, in
batches, and sent to their shards in ``write_batch`` chunks — every shard in parallel,
each shard's chunks in order. A write is acknowledged only by its shard's reply, after
the shard's ``Corpus.add`` made it durable; a dead shard is waited for and the chunk sent
again (``engine.cluster.calls``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import ray
from tqdm import tqdm

from dense import Embedder, EmbedderUnavailable
from engine.cluster.calls import ShardCalls
from engine.cluster.errors import ShardUnavailable
from engine.cluster.health import Operation
from engine.cluster.routing import group_by_shard
from engine.cluster.wire import to_row
from engine.documents import AddResult, Document
from engine.write.ingest import content_hash, embedding_text

logger = logging.getLogger(__name__)

Counts = tuple[int, int, int, int]
T = TypeVar("T")

_EMBED_CHUNK = 512


def on_each(indexes: Sequence[int], work: Callable[[int], T]) -> list[T]:
    """``work(index)`` for every shard in parallel, results in ``indexes`` order. Every
    shard's work finishes before an error is raised, so no write is left half-sent; if
    only shards were unavailable, one ``ShardUnavailable`` names them all."""
    if not indexes:
        return []
    with ThreadPoolExecutor(max_workers=len(indexes)) as pool:
        futures = [pool.submit(work, i) for i in indexes]
    errors = [e for e in (f.exception() for f in futures) if e is not None]
    unavailable = [e for e in errors if isinstance(e, ShardUnavailable)]
    if unavailable and len(unavailable) == len(errors):
        shards = tuple(sorted(s for e in unavailable for s in e.shards))
        message = "; ".join(str(e) for e in unavailable)
        raise ShardUnavailable(message, shards) from unavailable[0]
    if errors:
        raise errors[0]
    return [f.result() for f in futures]


class ShardWriter:
    """Sends a corpus's writes to its shards (see the module docstring)."""

    def __init__(
        self,
        corpus: str,
        shards: int,
        calls: ShardCalls,
        embedder: Embedder | None,
        *,
        write_batch: int,
        timeout_s: float,
    ) -> None:
        self._corpus = corpus
        self._shards = shards
        self._calls = calls
        self._embedder = embedder
        self._batch = write_batch
        self._timeout_s = timeout_s

    def add(
        self,
        docs: Sequence[Document],
        supplied: npt.NDArray[np.float32] | None,
        model: str | None,
        show_progress: bool,
    ) -> AddResult:
        """Write validated ``docs`` (with the caller's vectors, if ``supplied``)."""
        if supplied is None and self._embedder is not None and docs:
            supplied, model = self._embed_new(docs), self._embedder.name
        groups = group_by_shard([d.id for d in docs], self._shards)
        bar = tqdm(total=len(docs), disable=not show_progress, desc=f"add {self._corpus}")
        bar_lock = threading.Lock()

        def write(index: int) -> Counts:
            totals: Counts = (0, 0, 0, 0)
            positions = groups[index]
            for start in range(0, len(positions), self._batch):
                chunk = positions[start : start + self._batch]
                counts = self._chunk(index, [docs[p] for p in chunk], supplied, chunk, model)
                totals = _plus(totals, counts)
                with bar_lock:
                    bar.update(len(chunk))
            return totals

        with bar:
            results = on_each(sorted(groups), write)
        total: Counts = (0, 0, 0, 0)
        for counts in results:
            total = _plus(total, counts)
        return AddResult(*total)

    def delete(self, ids: Sequence[str]) -> int:
        groups = group_by_shard(ids, self._shards)

        def remove(index: int) -> int:
            deleted: int = self._call(index, "delete", [ids[p] for p in groups[index]])
            return deleted

        return sum(on_each(sorted(groups), remove))

    def _chunk(
        self,
        index: int,
        docs: Sequence[Document],
        supplied: npt.NDArray[np.float32] | None,
        positions: Sequence[int],
        model: str | None,
    ) -> Counts:
        rows = [to_row(d) for d in docs]
        if supplied is None:
            return self._send(index, rows, None, None)
        vectors = supplied[list(positions)]
        keep = ~np.isnan(vectors[:, 0])
        if keep.all():
            return self._send(index, rows, vectors, model)
        # Documents the shard holds unchanged keep their stored vectors (no model call),
        # as do documents the embedder failed on (the shard stores them degraded).
        counts: Counts = (0, 0, 0, 0)
        with_vectors = [r for r, k in zip(rows, keep, strict=True) if k]
        if with_vectors:
            counts = self._send(index, with_vectors, vectors[keep], model)
        without = [r for r, k in zip(rows, keep, strict=True) if not k]
        return _plus(counts, self._send(index, without, None, None))

    def _send(
        self,
        index: int,
        rows: list[dict[str, Any]],
        vectors: npt.NDArray[np.float32] | None,
        model: str | None,
    ) -> Counts:
        payload = ray.put(rows)  # sent again as is if the shard has to be retried
        counts: Counts = self._call(index, "add", payload, vectors, model)
        return counts

    def _call(self, index: int, method: str, *args: Any) -> Any:
        return self._calls.call(
            index, method, *args, timeout_s=self._timeout_s, operation=Operation.WRITE
        )

    def _embed_new(self, docs: Sequence[Document]) -> npt.NDArray[np.float32]:
        """Vectors for ``docs``; rows of NaN for documents a shard already holds with the
        same content and a vector (they keep theirs) or that the embedder failed on."""
        embedder = self._embedder
        assert embedder is not None
        states = self._content_state([d.id for d in docs])
        todo = [i for i, d in enumerate(docs) if states.get(d.id) != (content_hash(d), True)]
        width = dimension_if_up(embedder) if todo else None
        if width is None:
            todo, width = [], 1  # rows of NaN: sent without vectors, stored degraded
        out = np.full((len(docs), width), np.nan, dtype=np.float32)
        for start in range(0, len(todo), _EMBED_CHUNK):
            chunk = todo[start : start + _EMBED_CHUNK]
            try:
                if not embedder.is_available():
                    break
                out[chunk] = embedder.embed(
                    [embedding_text(docs[i].title, docs[i].text) for i in chunk]
                )
            except EmbedderUnavailable as exc:
                logger.warning(
                    "embedding %d documents failed (%s); their shards store them degraded",
                    len(chunk),
                    type(exc).__name__,
                )
        return out

    def _content_state(self, ids: Sequence[str]) -> dict[str, tuple[str, bool]]:
        groups = group_by_shard(ids, self._shards)

        def ask(index: int) -> dict[str, tuple[str, bool]]:
            state: dict[str, tuple[str, bool]] = self._call(
                index, "content_state", [ids[p] for p in groups[index]]
            )
            return state

        merged: dict[str, tuple[str, bool]] = {}
        for part in on_each(sorted(groups), ask):
            merged.update(part)
        return merged


def dimension_if_up(embedder: Embedder) -> int | None:
    """The embedder's dimension, or None while it is down (asking may need the provider:
    Ollama learns its dimension by embedding a probe)."""
    try:
        return embedder.dimension if embedder.is_available() else None
    except EmbedderUnavailable as exc:
        logger.warning("embedder down (%s); shards store documents degraded", type(exc).__name__)
        return None


def _plus(a: Counts, b: Counts) -> Counts:
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3])
