"""The derived indexes of one corpus (tantivy, FAISS), kept in step with the store.

The store is the source of truth and orders every write by ``seq``. Each derived index
records, in a small marker file written after the index itself, the ``seq`` it reflects.
Catching up replays store changes after that ``seq`` — idempotent upserts and deletes —
so a marker that lags (a crash between an index write and its marker) is harmless, and
a marker is never ahead of its index. A missing or corrupt index is rebuilt from the
store, re-using stored vectors (nothing is re-embedded).

Several processes. Every process keeps its own view: a tantivy reader over the shared
index directory and an in-memory FAISS index. Only the process holding the corpus's write
lock writes index files (tantivy commits, ``vectors.faiss``, markers) and repairs a
lagging, missing or damaged index (``open(holder=True)``, ``repair_keyword``). The others
``follow``. How each index does so is its keeper's business (``keyword_keeper``,
``vector_keeper``); this class holds the lock both are used under and the store ``seq``
and epoch this process's view has followed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from dense import FaissIndex, VectorStorage
from engine.errors import StorageError
from engine.storage import DocumentStore, StoredDocument, StoreState
from engine.write.keyword_keeper import KeywordIndexKeeper
from engine.write.vector_keeper import VectorIndexKeeper
from sparse import DEFAULT_TITLE_WEIGHT, FieldKind, TantivyIndex
from sparse.analyzers import Analyzer, LanguageAnalyzers

logger = logging.getLogger(__name__)

_DELETIONS_KEPT = 10_000  # the newest deletions never pruned: a process that follows
# (reads) fewer writes behind than this applies them; one further behind, or an index
# file older than what was pruned, reloads from the store instead (as a fresh open does)


class DerivedIndexes:
    """Owns a corpus's tantivy and FAISS indexes and keeps them consistent with its store."""

    def __init__(
        self,
        directory: Path,
        store: DocumentStore,
        languages: Mapping[int, str],
        *,
        vectors_enabled: bool,
        fields: Mapping[str, FieldKind] | None = None,
        search_threads: int | None = 1,
        read_only: bool = False,
        vector_storage: VectorStorage = VectorStorage.FLOAT32,
        title_weight: int = DEFAULT_TITLE_WEIGHT,
    ) -> None:
        self._dir = directory
        self._store = store
        analyzers = LanguageAnalyzers(
            by_language={0: Analyzer.ENGLISH}
            | {lang: Analyzer.from_str(name) for lang, name in languages.items()}
        )
        # The store holds the text: excerpts are cut there (one way for every strategy),
        # and keyword hits read small stored documents.
        tantivy = TantivyIndex(
            directory / "tantivy",
            analyzers,
            fields,
            store_text=False,
            title_weight=title_weight,
            create_missing=False,  # created by the lock holder only (``clear()``)
            read_only=read_only,
        )
        self._lock = threading.RLock()
        self._keyword = KeywordIndexKeeper(directory, store, tantivy)
        self._vectors = VectorIndexKeeper(
            directory, store, self._lock, search_threads=search_threads, storage=vector_storage
        )
        self._vectors_enabled = vectors_enabled
        # What this process's view reflects (see the module docstring, "Several processes").
        self._epoch: int | None = None
        self._followed_seq = -1  # the store seq last followed
        self._deleted_unpruned = 0  # deletions applied since tombstones were last pruned
        self.expected_dimension: int | None = None
        """The vectors' length when this index holds none yet but the corpus it is part
        of does (a shard of a sharded corpus, told by its coordinator)."""

    @property
    def tantivy(self) -> TantivyIndex:
        return self._keyword.tantivy

    @property
    def faiss(self) -> FaissIndex | None:
        return self._vectors.faiss

    @property
    def vector_length(self) -> int | None:
        """The length a new vector must have: the index's, else ``expected_dimension``."""
        index = self._vectors.faiss
        return self.expected_dimension if index is None else index.dimension

    @property
    def keyword_pending(self) -> bool:
        """tantivy.seq behind the store: the searcher re-reads it per search."""
        return self._keyword.pending

    @property
    def keyword_index_current(self) -> bool:
        """False while a failed keyword-index write waits to be caught up (here or in
        another process), or while the index is rebuilt: the cascade must not trust it."""
        return self._keyword.current

    def keyword_index_unreadable(self) -> None:
        """A search could not read the keyword index files: see
        ``KeywordIndexKeeper.note_unreadable`` (no index lock: a search calls it)."""
        self._keyword.note_unreadable()

    # -- opening ------------------------------------------------------------------------

    def open(self, *, holder: bool = True) -> None:
        """Bring both indexes up to the store's ``seq``. The holder of the write lock
        catches index files up or rebuilds them; any other process only follows."""
        with self._lock:
            state = self._store.state()
            self._epoch = state.epoch
            if not holder:
                if self._vectors_enabled:
                    self._vectors.open_following()
                else:
                    self._vectors.applied = state.seq
                self._follow_keyword(state.seq)
                self._keyword.check_counts()
                return
            self._keyword.open()
            if self._vectors_enabled:
                self._vectors.open_as_holder()
            else:
                self._vectors.applied = state.seq
            self._followed_seq = state.seq
            self._prune_tombstones()

    # -- following other processes' writes (no file written) --------------------------------

    def follow(self, state: StoreState) -> None:
        """Apply what other processes committed up to ``state`` to this process's view:
        FAISS in memory, a reload of the tantivy reader. Writes no file."""
        with self._lock:
            if self._epoch is not None and state.epoch != self._epoch:
                self._vectors.forget()  # every vector was dropped at once
            self._epoch = state.epoch
            if self._vectors_enabled:
                self._vectors.follow_or_reload()
            else:
                self._vectors.applied = state.seq
            self._follow_keyword(state.seq)

    def follows(self, state: StoreState) -> bool:
        """True when this process's view already reflects ``state`` (nothing to do)."""
        return (
            state.seq <= self._followed_seq
            and state.seq <= self._vectors.applied
            and state.epoch == self._epoch
        )

    def poll_keyword(self) -> None:
        """While ``keyword_pending``: reload tantivy if its marker moved."""
        with self._lock:
            self._follow_keyword(self._followed_seq)

    def _follow_keyword(self, seq: int) -> None:
        self._followed_seq = max(self._followed_seq, seq)
        self._keyword.follow(self._followed_seq)

    def replace_damaged_vectors(self) -> None:
        """The loaded vector file failed the checksum that runs after opening (large files:
        ``FaissIndex.damaged``): load this process's vector index from the store's
        vectors instead, and have the file written anew at the next flush. One attribute
        read when nothing is damaged (every search asks)."""
        index = self._vectors.faiss
        if index is None or index.damaged is None:
            return
        with self._lock:
            self._vectors.replace_damaged(index)

    def repair_keyword(self, seq: int) -> None:
        """For the write-lock holder: catch the keyword index files up to ``seq`` (or
        rebuild them) if they lag, were flagged behind or are missing."""
        with self._lock:
            self._follow_keyword(seq)  # the last holder's commits, first
            self._keyword.repair(seq)

    # -- writes (called after the store committed; write-lock holder) ------------------------

    def apply(self, written: Sequence[StoredDocument], deleted: Sequence[str], seq: int) -> None:
        """Mirror one committed store write into both indexes. A keyword-index failure is
        contained (see ``KeywordIndexKeeper.apply``)."""
        with self._lock:
            self._keyword.apply(written, deleted, seq)
            # The holder is caught up, and nobody else commits while it holds the lock.
            self._vectors.applied = self._followed_seq = seq
            if self._vectors_enabled:
                self._vectors.apply(written, deleted, seq)
            self._deleted_unpruned += len(deleted)
            if self._deleted_unpruned >= _DELETIONS_KEPT:
                self._prune_tombstones()

    @contextlib.contextmanager
    def privatizing(self, public: Sequence[str]) -> Iterator[None]:
        """Around the store write that makes these documents — public now — non-public:
        they leave the keyword index before it commits, and come back if it raises
        (``KeywordIndexKeeper.withdraw``). Nothing to do, and no commit, when ``public``
        is empty."""
        if not public:
            yield
            return
        with self._lock:
            self._keyword.withdraw(public)
        stored = False
        try:
            yield
            stored = True
        finally:
            with self._lock:
                self._keyword.end_withdrawal(stored=stored)

    @contextlib.contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """Within this block, keyword-index upserts are committed in large batches and at
        the end (also when the block raises: what the store committed is indexed). Until
        then they are durable in the store but not yet keyword-searchable."""
        with self._lock:
            self._keyword.start_batching()
        try:
            yield
        finally:
            with self._lock:
                self._keyword.stop_batching()

    def apply_vectors(self, ids: Sequence[str], vectors: np.ndarray, seq: int) -> None:
        """A vector-only write at ``seq`` (a repair): the keyword index is unchanged."""
        with self._lock:
            self._vectors.apply_vectors(ids, vectors, seq)
            self._followed_seq = seq
            self._keyword.unchanged_at(seq)

    def drop_vectors(self, seq: int) -> None:
        """Forget every vector (an embedder switch, a vector-only write at ``seq``)."""
        with self._lock:
            self._epoch = self._store.state().epoch
            self._vectors.drop(seq)
            self._keyword.unchanged_at(seq)

    def flush(self) -> None:
        """Commit pending keyword writes and save the vector file (write-lock holder)."""
        with self._lock:
            self._keyword.flush()
            if self._vectors_enabled:
                self._vectors.flush()
            self._prune_tombstones()

    def _prune_tombstones(self) -> None:
        """Forget deletions every index file on disk already reflects (the store keeps
        one row per deleted id otherwise, for good), except the newest
        ``_DELETIONS_KEPT``. A contained failure: they are pruned at a later try."""
        self._deleted_unpruned = 0
        if self._store.read_only:
            return
        through = self._keyword.saved_seq()
        saved = self._vectors.saved_seq() if self._vectors_enabled else None
        if saved is not None:
            through = min(through, saved)
        if through < 0:
            return
        try:
            gone = self._store.prune_tombstones(through, keep=_DELETIONS_KEPT)
        except StorageError as exc:
            logger.warning("could not prune deletions (%s); tried again later", exc)
            return
        if gone:
            logger.info("forgot %d deletions the index files reflect", gone)

    def close(self, *, flush: bool = True) -> None:
        """Release the indexes; ``flush`` first only when holding the write lock."""
        if flush:
            try:
                self.flush()
            except StorageError as exc:  # a full disk: the store has every vector anyway
                logger.warning("closing without saving (%s); the next open catches up", exc)
        self._vectors.close()
        self._keyword.close()

    def size_on_disk(self) -> int:
        """Bytes of the corpus's files: an estimate taken while tantivy merges and saves
        swap files in and out, so one that vanishes between listing and ``stat`` is
        skipped rather than failing ``stats``."""
        total = 0
        for path in self._dir.rglob("*"):
            try:
                if path.is_file():
                    total += path.stat().st_size
            except FileNotFoundError:
                continue
        return total
