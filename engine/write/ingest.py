"""Writing documents: validate, embed what needs it, store, mirror into the indexes.

A document's vector is re-used when its title and text are unchanged, so an update of its
URL or access groups never costs a model call. When the embedder is down or fails, the
documents are stored anyway, keyword-searchable, with status DEGRADED (counted in the
``documents_degraded`` gauge) until ``repair`` re-embeds them.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from dense import Embedder, EmbedderUnavailable
from engine.config import FieldType
from engine.documents import Document
from engine.errors import InvalidArgument
from engine.fields import encode_fields
from engine.metrics import EngineMetrics
from engine.storage import DocumentStore, EmbeddingStatus, StoredDocument
from engine.write.indexes import DerivedIndexes
from engine.write.repair_plan import RepairPlan

logger = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]


def content_hash(doc: Document) -> str:
    return hashlib.sha256(f"{doc.title}\x1f{doc.text}".encode("utf-8", "surrogatepass")).hexdigest()


def embedding_text(title: str, text: str) -> str:
    """What the embedder sees for a document: title, then body."""
    return f"{title}\n{text}".strip() if title else text


def checked_vectors(vectors: object, rows: int) -> Vectors:
    """Caller-supplied vectors: one row each, finite, returned L2-normalised float32
    (their length against the corpus's: ``vector_model.check_vector_dimension``)."""
    try:
        array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"embeddings must be a numeric array: {exc}") from exc
    if array.ndim != 2 or array.shape[0] != rows:
        raise InvalidArgument(f"embeddings must have shape ({rows}, dim), got {array.shape}")
    if not np.isfinite(array).all():
        raise InvalidArgument("embeddings contain NaN or infinite values")
    norms = np.linalg.norm(array.astype(np.float64), axis=1, keepdims=True)  # 3e19**2 fits
    if (norms == 0).any():
        raise InvalidArgument("embeddings contain an all-zero vector")
    return np.ascontiguousarray(array / norms, dtype=np.float32)


class Ingestor:
    """Runs the write path for one corpus (callers hold the corpus's write lock)."""

    def __init__(
        self,
        corpus: str,
        store: DocumentStore,
        indexes: DerivedIndexes,
        embedder: Embedder | None,
        metrics: EngineMetrics,
        fields: Mapping[str, FieldType] | None = None,
    ) -> None:
        self._fields = dict(fields or {})
        self._corpus = corpus
        self._store = store
        self._indexes = indexes
        self._embedder = embedder
        self._metrics = metrics
        self._plan = RepairPlan()

    def write(
        self, docs: Sequence[Document], supplied: Vectors | None
    ) -> tuple[int, int, int, int]:
        """Store one chunk; returns (added, updated, unchanged, degraded)."""
        hashes = [content_hash(d) for d in docs]
        state = self._store.content_state([d.id for d in docs])
        vectors: list[Vectors | None] = [None] * len(docs)
        unchanged = 0
        if self._embedder is not None:
            if supplied is not None:
                vectors = list(supplied)
            else:
                reusable = [
                    d.id
                    for d, h in zip(docs, hashes, strict=True)
                    if state.get(d.id, ("", False)) == (h, True)
                ]
                old = self._store.get_many(reusable, public_only=False)
                need: list[int] = []
                for i, doc in enumerate(docs):
                    previous = old.get(doc.id)
                    if previous is not None and previous.embedding is not None:
                        vectors[i] = previous.embedding
                        unchanged += 1
                    else:
                        need.append(i)
                if need:
                    fresh = self.embed(
                        [embedding_text(docs[i].title, docs[i].text) for i in need],
                        public=any(not docs[i].access_groups for i in need),
                    )
                    if fresh is not None:
                        for i, vector in zip(need, fresh, strict=True):
                            vectors[i] = vector
        rows = [
            StoredDocument(
                source_id=d.id,
                title=d.title,
                text=d.text,
                url=d.url,
                language_id=d.language_id,
                access_groups=d.access_groups,
                page_uid=d.page_uid,
                content_hash=h,
                embedding_status=(
                    EmbeddingStatus.NOT_REQUIRED
                    if self._embedder is None
                    else EmbeddingStatus.EMBEDDED
                    if v is not None
                    else EmbeddingStatus.DEGRADED
                ),
                embedding=v,
                fields=encode_fields(d.id, d.fields, self._fields),
            )
            for d, h, v in zip(docs, hashes, vectors, strict=True)
        ]
        # Documents this write makes non-public leave the keyword index first: the bulk
        # add it is part of commits that index late (``DerivedIndexes.privatizing``).
        hidden = [r.source_id for r in rows if not r.is_public]
        with self._indexes.privatizing(self._store.public_among(hidden) if hidden else []):
            added, updated = self._store.upsert(rows, self._model_name())
        self._indexes.apply(rows, [], self._store.seq)
        degraded = sum(1 for r in rows if r.embedding_status is EmbeddingStatus.DEGRADED)
        return added, updated, unchanged, degraded

    def embed(self, texts: list[str], *, public: bool = True) -> Vectors | None:
        """Vectors for ``texts``, or None when the provider is down (counted, not raised).
        ``public``: some of the texts are public documents' (see ``_embed``)."""
        return self._embed(texts, public=public)[0]

    def _embed(self, texts: list[str], *, public: bool = True) -> tuple[Vectors | None, bool]:
        """``embed``, and whether the provider was asked (False: it was down, or nothing
        to embed). A batch of non-public documents only is not timed in the metrics,
        which anyone may read and which say nothing of those documents."""
        embedder = self._embedder
        if embedder is None or not texts:
            return None, False
        up = embedder.is_available()
        self._metrics.embedder_up.labels(self._corpus).set(1 if up else 0)
        if not up:
            return None, False
        started = time.perf_counter()
        try:
            vectors = embedder.embed(texts)
        except EmbedderUnavailable as exc:
            self._metrics.embedder_up.labels(self._corpus).set(0)
            logger.warning(
                "embedding %d documents failed (%s: %.300s); storing them degraded",
                len(texts),
                type(exc).__name__,
                exc,  # the reason; Tandem's embedders name the model and failure, never texts
            )
            return None, True
        finally:
            if public:
                self._metrics.embed_duration.labels(self._corpus, "documents").observe(
                    time.perf_counter() - started
                )
        return np.asarray(vectors, dtype=np.float32), True

    def repair(self, batch_size: int) -> int:
        """Re-embed up to ``batch_size`` degraded documents, picked by the repair plan
        (``engine.write.repair_plan``); returns how many healed. A held-back document
        due for another try is tried alone first; if it fails again, the call goes on to
        a batch of the others (so refused documents never use up a repair pass)."""
        if self._embedder is None:
            return 0
        retried = False
        while True:
            ids = self._plan.next_batch(
                batch_size, self._store.degraded_ids, retry_held=not retried
            )
            if not ids:
                return 0
            docs = self._store.get_many(ids, public_only=False)
            ordered = [
                docs[i]
                for i in ids
                if i in docs and docs[i].embedding_status is EmbeddingStatus.DEGRADED
            ]
            if not ordered:
                self._plan.forget(ids)  # held back, then deleted or embedded by a later write
                continue
            retry = len(ordered) == 1 and self._plan.is_held_back(ordered[0].source_id)
            healed = self._embed_batch(ordered)
            if healed or not retry or retried:
                return healed
            retried = True  # one retry of a held-back document per call, then the others

    def _embed_batch(self, ordered: list[StoredDocument]) -> int:
        ids = [d.source_id for d in ordered]
        vectors, asked = self._embed(
            [embedding_text(d.title, d.text) for d in ordered],
            public=any(d.is_public for d in ordered),
        )
        if vectors is None:
            if asked:
                self._plan.failed(ids)
            return 0
        assert self._embedder is not None
        self._store.set_embeddings(ids, vectors, self._embedder.name)
        self._indexes.apply_vectors(ids, vectors, self._store.seq)
        self._plan.healed(ids)
        # Public ones only: anyone may read the metrics, which say nothing of the rest.
        self._metrics.repaired.labels(self._corpus).inc(sum(d.is_public for d in ordered))
        return len(ids)

    def _model_name(self) -> str | None:
        return None if self._embedder is None else self._embedder.name
