"""The write path of a sharded corpus: embed once in the coordinator, route, send.

Documents arrive validated. Those a shard already holds with the same title and text and
a vector keep it (one look-up per shard, no model call); the rest are embedded here, in
batches, and sent to their shards in ``write_batch`` chunks — every shard in parallel,
each shard's chunks in order. A write is acknowledged only by its shard's reply, after
the shard's ``Corpus.add`` made it durable; a dead shard is waited for and the chunk sent
again (``engine.cluster.calls``).

Every chunk the embedder returns is checked (``engine.dimension_guard.checked_output``:
as many rows as texts, finite, not all zero, as long as the corpus's vectors) before it
is sent: a chunk that fails the check is provider trouble like a provider that is down —
its documents are stored without vectors, degraded, and ``repair`` embeds them later —
never an error that loses the batch.
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
from engine.dimension_guard import checked_output
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


class CorpusDimension:
    """The length of a sharded corpus's stored vectors, as its coordinator knows it:
    told by the shards (when opening, and before a write while still unknown) or learnt
    from vectors the shards acknowledged; ``None`` while no shard holds a vector. Once
    known it does not change (a sharded corpus has no switch of model). Called, it is
    the ``expected`` of the coordinator's ``DimensionGuard``."""

    def __init__(self, ask: Callable[[], int | None], known: int | None = None) -> None:
        self._ask = ask
        self._known = known

    def __call__(self) -> int | None:
        return self._known

    def refresh(self) -> int | None:
        """The length, asking the shards first while it is unknown."""
        if self._known is None:
            self._known = self._ask()
        return self._known

    def learn(self, width: int) -> None:
        """Vectors of ``width`` values were stored (the shards accepted them)."""
        if self._known is None:
            self._known = width


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
        dimension: CorpusDimension | None = None,
    ) -> None:
        self._corpus = corpus
        self._shards = shards
        self._calls = calls
        self._embedder = embedder
        self._dimension = dimension if dimension is not None else CorpusDimension(lambda: None)
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
        if supplied is not None and not np.isnan(supplied[:, 0]).all():
            self._dimension.learn(supplied.shape[1])
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
        # With the corpus's length: a shard holding no vector yet holds to it, so rows
        # sent without vectors (the embedder failed, or its output was refused) are not
        # embedded there by a model of another length.
        counts: Counts = self._call(index, "add", payload, vectors, model, self._dimension())
        return counts

    def _call(self, index: int, method: str, *args: Any) -> Any:
        return self._calls.call(
            index, method, *args, timeout_s=self._timeout_s, operation=Operation.WRITE
        )

    def _embed_new(self, docs: Sequence[Document]) -> npt.NDArray[np.float32]:
        """Vectors for ``docs``; rows of NaN for documents a shard already holds with the
        same content and a vector (they keep theirs) or that the embedder failed on —
        down, or answering with output no corpus can use (``checked_output``: NaN or
        infinite values, zero rows, too few rows, another length than the corpus's)."""
        embedder = self._embedder
        assert embedder is not None
        states = self._content_state([d.id for d in docs])
        todo = [i for i, d in enumerate(docs) if states.get(d.id) != (content_hash(d), True)]
        width = self._width(embedder) if todo else None
        if width is None:
            todo, width = [], 1  # rows of NaN: sent without vectors, stored degraded
        out = np.full((len(docs), width), np.nan, dtype=np.float32)
        for start in range(0, len(todo), _EMBED_CHUNK):
            chunk = todo[start : start + _EMBED_CHUNK]
            try:
                if not embedder.is_available():
                    break
                vectors = embedder.embed(
                    [embedding_text(docs[i].title, docs[i].text) for i in chunk]
                )
                out[chunk] = checked_output(vectors, len(chunk), width)
            except EmbedderUnavailable as exc:  # InvalidOutput (checked_output's) is one
                logger.warning(
                    "embedding %d documents failed (%s); their shards store them degraded",
                    len(chunk),
                    type(exc).__name__,
                )
        return out

    def _width(self, embedder: Embedder) -> int | None:
        """The length the vectors must have: the corpus's (asked of the shards while
        unknown), else the embedder's; ``None`` while neither can say (provider down)."""
        known = self._dimension.refresh()
        return known if known is not None else dimension_if_up(embedder)

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
