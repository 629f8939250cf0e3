"""The derived indexes of one corpus (tantivy, FAISS), kept in step with the store.

The store is the source of truth and orders every write by ``seq``. Each derived index
records, in a small marker file written after the index itself, the ``seq`` it reflects.
Catching up replays store changes after that ``seq`` — idempotent upserts and deletes —
so a marker that lags (a crash between an index write and its marker) is harmless, and
a marker is never ahead of its index. A missing or corrupt index is rebuilt from the
store, re-using stored vectors (nothing is re-embedded).

The FAISS file is saved lazily (on flush/close, and after enough unsaved changes): the
vectors it holds are in the store anyway, so a crash costs a cheap catch-up, not data.

Several processes. Every process keeps its own view: a tantivy reader over the shared
index directory and an in-memory FAISS index. Only the process holding the corpus's write
lock writes index files (tantivy commits, ``vectors.faiss``, markers) and repairs a
lagging, missing or damaged index (``open(holder=True)``, ``repair_keyword``). The others
``follow``: their FAISS index applies the store's changes since the ``seq`` it reflects
(tombstones, then changed rows with their stored vectors, read in one read transaction),
and their tantivy reader reloads when ``tantivy.seq`` moves. While that marker is behind
the store (a writer between its store and index commits, or one that died there) the
follower re-reads it on every search (``keyword_pending``). A keyword-index write that
failed after the store committed leaves a ``tantivy.behind`` flag file, and a rebuild
writes the marker -1 first: in both cases every process answers keyword searches from
the database fallback until the holder has caught the index up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from dense import FaissIndex, FaissIndexCorrupt, VectorStorage
from engine.errors import StorageError
from engine.storage import DocumentStore, StoredDocument, StoreState
from sparse import (
    DEFAULT_TITLE_WEIGHT,
    FieldKind,
    SparseDocument,
    SparseError,
    TantivyIndex,
)
from sparse.analyzers import Analyzer, LanguageAnalyzers

logger = logging.getLogger(__name__)

_FAISS_SAVE_EVERY = 20_000  # unsaved vector changes before an eager save ...
_FAISS_SAVE_FRACTION = 4  # ... or a quarter of the index, whichever is larger: each save
# rewrites every vector, so a fixed interval made bulk loads quadratic (1M vectors: ~38 GB
# written); a geometric one keeps them linear. A crash replays at most that many from the
# store on the next open.
_REBUILD_BATCH = 2_000  # stored documents read per FAISS catch-up step
_KEYWORD_BATCH = 20_000  # documents per tantivy commit in bulk writes and rebuilds: a
# commit costs ~40 ms plus merges whatever its size, so one per 512-document store chunk
# made commits three quarters of keyword ingest time


def to_sparse(doc: StoredDocument) -> SparseDocument:
    return SparseDocument(
        source_id=doc.source_id,
        title=doc.title,
        text=doc.text,
        url=doc.url,
        language_id=doc.language_id,
        public=doc.is_public,
        page_uid=doc.page_uid,
        fields=doc.fields,
    )


def _read_marker(path: Path) -> int:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return -1


def _write_marker(path: Path, seq: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(str(seq))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


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
        self._vector_storage = vector_storage
        self._search_threads = search_threads
        self._store = store
        analyzers = LanguageAnalyzers(
            by_language={0: Analyzer.ENGLISH}
            | {lang: Analyzer.from_str(name) for lang, name in languages.items()}
        )
        # The store holds the text: excerpts are cut there (one way for every strategy),
        # and keyword hits read small stored documents.
        self.tantivy = TantivyIndex(
            directory / "tantivy",
            analyzers,
            fields,
            store_text=False,
            title_weight=title_weight,
            create_missing=False,  # created by the lock holder only (``clear()``)
            read_only=read_only,
        )
        self._tantivy_marker = directory / "tantivy.seq"
        self._behind_flag = directory / "tantivy.behind"
        self._vectors_enabled = vectors_enabled
        self._faiss_path = directory / "vectors.faiss"
        self._faiss_marker = directory / "vectors.seq"
        self.faiss: FaissIndex | None = None
        self._unsaved = 0
        self._tantivy_behind = False
        self._pending_keyword: list[SparseDocument] | None = None  # inside bulk_writes()
        self._pending_seq = -1
        self._lock = threading.RLock()
        # What this process's view reflects (see the module docstring, "Several processes").
        self._applied = -1  # the store seq the in-memory FAISS index reflects
        self._epoch: int | None = None
        self._tantivy_seen = -1  # tantivy.seq when the tantivy reader last reloaded
        self._followed_seq = -1  # the store seq last followed
        self._keyword_flagged = False  # behind flag, or a rebuild running elsewhere
        self._vectors_file_stale = False  # vectors.faiss damaged or missing: save soon
        self.keyword_pending = False  # tantivy.seq behind the store: re-read it per search

    # -- opening ------------------------------------------------------------------------

    def open(self, *, holder: bool = True) -> None:
        """Bring both indexes up to the store's ``seq``. The holder of the write lock
        catches index files up or rebuilds them; any other process only follows."""
        if not holder:
            self._open_following()
            return
        with self._lock:
            state = self._store.state()
            self._epoch = state.epoch
            try:
                self._open_tantivy()
            except (SparseError, OSError) as exc:
                # The store still answers through the database fallback; retry on next write.
                self._keyword_failed(exc, "unavailable at open")
            if self._vectors_enabled:
                self._open_faiss()
            else:
                self._applied = state.seq
            self._followed_seq = state.seq

    def _open_tantivy(self) -> None:
        marker = _read_marker(self._tantivy_marker)
        existed = (self.tantivy.path / "meta.json").is_file()
        if marker < 0 or not existed or not self.tantivy.is_available():
            self._rebuild_tantivy()
            return
        seq = self._store.seq
        if marker < seq:
            try:
                # A writer that died mid-commit (why the marker is behind) left files that
                # would make the catch-up's first write fail and rebuild the whole index.
                self.tantivy.collect_garbage()
                self._catch_up_tantivy(marker)
            except SparseError as exc:
                logger.warning(
                    "tantivy catch-up failed (%s); rebuilding from the store",
                    type(exc.__cause__ or exc).__name__,
                )
                self._rebuild_tantivy()
                return
        self.tantivy.commit()  # reload: another process may have committed since
        # Public documents only (``TantivyIndex.upsert``): an index built before that
        # rule, holding non-public ones, disagrees here and is rebuilt once.
        if self.tantivy.doc_count() != self._store.count() - self._store.count_non_public():
            logger.warning("keyword index disagrees with the store; rebuilding it")
            self._rebuild_tantivy()
            return
        self._mark_tantivy(seq)

    def _catch_up_tantivy(self, since: int) -> None:
        deleted = self._store.tombstones_since(since)
        if deleted:
            self.tantivy.delete(deleted)
        batch: list[SparseDocument] = []
        for doc in self._store.iter_documents(since_seq=since):
            batch.append(to_sparse(doc))
            if len(batch) >= _KEYWORD_BATCH:
                self.tantivy.upsert(batch)
                batch = []
        if batch:
            self.tantivy.upsert(batch)

    def _rebuild_tantivy(self) -> None:
        seq = self._store.seq
        logger.info("rebuilding the keyword index from the store")
        _write_marker(self._tantivy_marker, -1)  # other processes: not usable meanwhile
        self.tantivy.clear()
        self._catch_up_tantivy(-1)
        self._mark_tantivy(seq)

    def _mark_tantivy(self, seq: int) -> None:
        """The keyword index holds everything up to ``seq``: say so, to every process."""
        _write_marker(self._tantivy_marker, seq)
        self._tantivy_seen = seq
        self._tantivy_behind = self._keyword_flagged = False
        self._behind_flag.unlink(missing_ok=True)

    def _keyword_failed(self, exc: BaseException, what: str) -> None:
        self._tantivy_behind = True
        try:
            self._behind_flag.touch()
        except OSError:
            logger.warning("could not flag the keyword index as behind")
        logger.warning("keyword index %s (%s); will catch up", what, type(exc).__name__)

    def _open_faiss(self) -> None:
        # Saves killed part-way leave their temporary file (named at random, each as
        # large as the index); only the write-lock holder saves, and it holds it now.
        for leftover in self._faiss_path.parent.glob(f".{self._faiss_path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                leftover.unlink()
        marker = _read_marker(self._faiss_marker)
        index: FaissIndex | None = None
        if marker >= 0 and self._faiss_path.exists():
            try:
                index = FaissIndex.load(
                    self._faiss_path,
                    search_threads=self._search_threads,
                    on_graph=self._graph_ready,
                )
            except (FaissIndexCorrupt, OSError):
                logger.warning("vector index file is damaged; rebuilding from stored vectors")
                index, marker = None, -1
        else:
            marker = -1
        seq = self._store.seq
        self.faiss = index
        if marker < seq:
            self._catch_up_faiss(marker)
            self._save_at_open(seq)
        if self._disagrees_with_store():
            logger.warning("vector index disagrees with the store; rebuilding it")
            self.faiss = None
            self._catch_up_faiss(-1)
            self._save_at_open(seq)
        self._applied = seq

    def _save_at_open(self, seq: int) -> None:
        """Save what the open caught up; a full disk leaves the file stale (saved at a
        later flush, or caught up again at the next open), never the corpus unopenable."""
        try:
            self.save_vectors(seq)
        except StorageError as exc:
            logger.warning("could not save the caught-up vector index (%s); serving it", exc)
            self._vectors_file_stale = True

    # -- following other processes' writes (no file written) --------------------------------

    def _open_following(self) -> None:
        with self._lock:
            state = self._store.state()
            self._epoch = state.epoch
            if self._vectors_enabled:
                marker = _read_marker(self._faiss_marker)  # before the file: may only lag
                self.faiss = None
                if marker >= 0 and self._faiss_path.exists():
                    try:
                        self.faiss = FaissIndex.load(
                            self._faiss_path, search_threads=self._search_threads
                        )
                    except (FaissIndexCorrupt, OSError):
                        logger.warning("vector index file is damaged; loading stored vectors")
                        marker, self._vectors_file_stale = -1, True
                self._applied = marker if self.faiss is not None else -1
                self._follow_faiss(verify=True)
            else:
                self._applied = state.seq
            self._follow_tantivy(state.seq)

    def follow(self, state: StoreState) -> None:
        """Apply what other processes committed up to ``state`` to this process's view:
        FAISS in memory, a reload of the tantivy reader. Writes no file."""
        with self._lock:
            if self._epoch is not None and state.epoch != self._epoch:
                self.faiss, self._applied = None, -1  # every vector was dropped at once
            self._epoch = state.epoch
            if self._vectors_enabled:
                try:
                    self._follow_faiss()
                except ValueError as exc:  # e.g. vectors of another dimension arrived
                    logger.warning("vector index could not follow (%s); reloading it", exc)
                    self.faiss, self._applied = None, -1
                    self._follow_faiss()
            else:
                self._applied = state.seq
            self._follow_tantivy(state.seq)

    def replace_damaged_vectors(self) -> None:
        """The loaded vector file failed the checksum that runs after opening (large files:
        ``FaissIndex.damaged``): load this process's vector index from the store's
        vectors instead, and have the file written anew at the next flush. One attribute
        read when nothing is damaged (every search asks)."""
        index = self.faiss
        if index is None or index.damaged is None:
            return
        with self._lock:
            if self.faiss is not index:
                return
            logger.warning("vector index file failed its checksum; loading stored vectors")
            index.close()
            self.faiss, self._applied = None, -1
            self._follow_faiss()
            self._vectors_file_stale = True

    def follows(self, state: StoreState) -> bool:
        """True when this process's view already reflects ``state`` (nothing to do)."""
        return (
            state.seq <= self._followed_seq
            and state.seq <= self._applied
            and state.epoch == self._epoch
        )

    def poll_keyword(self) -> None:
        """While ``keyword_pending``: reload tantivy if its marker moved."""
        with self._lock:
            self._follow_tantivy(self._followed_seq)

    def _follow_faiss(self, *, verify: bool = False) -> None:
        with self._store.read_snapshot() as snapshot:
            if snapshot.seq > self._applied:
                self._catch_up_faiss(self._applied)
            if verify and self._disagrees_with_store():
                logger.warning("vector index disagrees with the store; loading stored vectors")
                self.faiss = None
                self._catch_up_faiss(-1)
                self._vectors_file_stale = True
            self._applied = max(self._applied, snapshot.seq)

    def _disagrees_with_store(self) -> bool:
        """The vector index holds another number of vectors than the store, or vectors of
        another length (a file copied from another corpus, or left by a switch of model
        that did not finish): a search would find every query the wrong length."""
        held = 0 if self.faiss is None else len(self.faiss)
        if held != self._store.count_with_vectors():
            return True
        stored = self._store.vector_dimension() if held else None
        return self.faiss is not None and stored is not None and stored != self.faiss.dimension

    def _follow_tantivy(self, seq: int) -> None:
        self._followed_seq = max(self._followed_seq, seq)
        marker = _read_marker(self._tantivy_marker)
        if marker != self._tantivy_seen and marker >= 0:
            try:
                self.tantivy.commit()  # reload: every commit before the marker shows
                self._tantivy_seen = marker
            except (SparseError, OSError) as exc:
                logger.debug("keyword index reload failed (%s)", type(exc).__name__)
        lagging = marker < self._followed_seq
        self._keyword_flagged = marker < 0 or (lagging and self._behind_flag.exists())
        self.keyword_pending = lagging or self._tantivy_seen != marker

    def repair_keyword(self, seq: int) -> None:
        """For the write-lock holder: catch the keyword index files up to ``seq`` (or
        rebuild them) if they lag, were flagged behind or are missing."""
        with self._lock:
            self._follow_tantivy(seq)  # the last holder's commits, first
            if (
                self._tantivy_seen >= seq
                and not self._tantivy_behind
                and not self._keyword_flagged
                and self.tantivy.is_available()
            ):
                return
            self._tantivy_behind = True  # replays from the marker (or rebuilds)
            self._apply_keyword([], [], seq)

    def _catch_up_faiss(self, since: int) -> None:
        if self.faiss is not None:
            deleted = self._store.tombstones_since(since)
            if deleted:
                self.faiss.remove(deleted)
        ids: list[str] = []
        vectors: list[np.ndarray] = []
        stale: list[str] = []
        dimension = None if self.faiss is None else self.faiss.dimension
        foreign = 0
        for doc in self._store.iter_documents(since_seq=since):
            if doc.embedding is not None and dimension is None:
                dimension = len(doc.embedding)
            if doc.embedding is not None and len(doc.embedding) == dimension:
                ids.append(doc.source_id)
                vectors.append(doc.embedding)
            else:
                # No vector, or one of another length (stored before adds checked it):
                # keyword-searchable only, rather than a corpus that cannot open.
                foreign += doc.embedding is not None
                stale.append(doc.source_id)
            if len(ids) >= _REBUILD_BATCH:
                self._faiss_upsert(ids, np.vstack(vectors))
                ids, vectors = [], []
        if ids:
            self._faiss_upsert(ids, np.vstack(vectors))
        if stale and self.faiss is not None:
            self.faiss.remove(stale)
        if foreign:
            logger.warning(
                "%d stored vectors have another dimension than the index's %s; "
                "left out of vector search",
                foreign,
                dimension,
            )

    def _faiss_upsert(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        if self.faiss is None:
            self.faiss = FaissIndex(
                int(vectors.shape[1]),
                search_threads=self._search_threads,
                storage=self._vector_storage,
                on_graph=self._graph_ready,
            )
        self.faiss.add(list(ids), vectors)

    # -- writes (called after the store committed) -------------------------------------------

    def apply(self, written: Sequence[StoredDocument], deleted: Sequence[str], seq: int) -> None:
        """Mirror one committed store write into both indexes.

        A keyword-index failure is contained: the write is already durable in the store
        (and findable through the database fallback); the index catches up on the next
        write or the next open.
        """
        with self._lock:
            self._apply_keyword(written, deleted, seq)
            # The holder is caught up, and nobody else commits while it holds the lock.
            self._applied = self._followed_seq = seq
            if not self._vectors_enabled:
                return
            with_vectors = [d for d in written if d.embedding is not None]
            without = [d.source_id for d in written if d.embedding is None]
            if with_vectors:
                self._faiss_upsert(
                    [d.source_id for d in with_vectors],
                    np.vstack([d.embedding for d in with_vectors if d.embedding is not None]),
                )
            if self.faiss is not None and (without or deleted):
                self.faiss.remove([*without, *deleted])
            self._unsaved += len(written) + len(deleted)
            if self._save_due():
                self.save_vectors(seq)

    @contextlib.contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """Within this block, keyword-index upserts are committed every ``_KEYWORD_BATCH``
        documents and at the end (also when the block raises: what the store committed is
        indexed). Until then they are durable in the store but not yet keyword-searchable.
        """
        with self._lock:
            self._pending_keyword = []
        try:
            yield
        finally:
            with self._lock:
                self._flush_pending_keyword()
                self._pending_keyword = None

    def _flush_pending_keyword(self) -> None:
        pending = self._pending_keyword
        if not pending:
            return
        self._pending_keyword = []
        try:
            self.tantivy.upsert(pending)
            self._mark_tantivy(self._pending_seq)
        except (SparseError, OSError) as exc:
            self._keyword_failed(exc, "write failed")

    def _apply_keyword(
        self, written: Sequence[StoredDocument], deleted: Sequence[str], seq: int
    ) -> None:
        pending = self._pending_keyword
        if pending is not None and not deleted and not self._tantivy_behind:
            pending.extend(to_sparse(d) for d in written)
            self._pending_seq = seq
            if len(pending) >= _KEYWORD_BATCH:
                self._flush_pending_keyword()
            return
        self._flush_pending_keyword()  # keep the order of writes
        try:
            if self._tantivy_behind:
                self._open_tantivy()  # replays this write too
                self._tantivy_behind = False
                return
            if deleted:
                self.tantivy.delete(deleted)
            if written:
                self.tantivy.upsert([to_sparse(d) for d in written])
            self._mark_tantivy(seq)
        except (SparseError, OSError) as exc:
            self._keyword_failed(exc, "write failed")

    def apply_vectors(self, ids: Sequence[str], vectors: np.ndarray, seq: int) -> None:
        """A vector-only write at ``seq`` (a repair): the keyword index is unchanged."""
        with self._lock:
            if ids:
                self._faiss_upsert(ids, vectors)
            self._applied = self._followed_seq = seq
            self._unsaved += len(ids)
            if self._save_due():
                self.save_vectors(seq)
            self._keyword_unchanged_at(seq)

    def drop_vectors(self, seq: int) -> None:
        """Forget every vector (an embedder switch, a vector-only write at ``seq``)."""
        with self._lock:
            self.faiss = None
            self._applied = seq
            self._epoch = self._store.state().epoch
            self.save_vectors(seq)
            self._keyword_unchanged_at(seq)

    def _keyword_unchanged_at(self, seq: int) -> None:
        """The store's write ``seq`` changed no keyword content: a keyword index current at
        the write before (each write is one ``seq``) is current at this one too. Without
        the marker moving, the next write-lock holder took the index for lagging and
        replayed every document the write touched — all of them after a switch — while
        this process's searches, told the index was not current, went without their
        keyword arm."""
        if self._tantivy_behind or self._keyword_flagged:
            return
        if self._pending_keyword:
            # Upserts still batched (inside ``bulk_writes``, e.g. an add that heals after
            # writing): the flush marks this write's seq, as current as the one before.
            if self._pending_seq == seq - 1:
                self._pending_seq = seq
            return
        if self._tantivy_seen == seq - 1:
            try:
                self._mark_tantivy(seq)
            except OSError:  # the marker only lags: the next holder replays, as before
                logger.debug("could not move the keyword marker past a vector-only write")

    def _save_due(self) -> bool:
        held = 0 if self.faiss is None else len(self.faiss)
        due = self._unsaved >= max(_FAISS_SAVE_EVERY, held // _FAISS_SAVE_FRACTION)
        return due or self._vectors_file_stale

    def save_vectors(self, seq: int) -> None:
        """Persist the vector index and its marker. The vectors are safe in the store
        either way; a failure here (disk full) only means a longer catch-up on open."""
        with self._lock:
            try:
                try:
                    self._save_or_remove_vector_file()
                except FaissIndexCorrupt:
                    # Its mapped file changed in place (the save compares what it streams
                    # with the file's recorded digests): load the store's vectors, save those.
                    self.replace_damaged_vectors()
                    self._save_or_remove_vector_file()
                _write_marker(self._faiss_marker, seq)
            except OSError as exc:
                raise StorageError(f"could not save the vector index: {exc}") from exc
            self._unsaved = 0
            self._vectors_file_stale = False

    def _save_or_remove_vector_file(self) -> None:
        if self.faiss is not None and len(self.faiss) > 0:
            self.faiss.save(self._faiss_path)
        else:
            self._faiss_path.unlink(missing_ok=True)

    @property
    def keyword_index_current(self) -> bool:
        """False while a failed keyword-index write is waiting to be caught up (here or
        in another process), or while it is being rebuilt: the index then lacks
        acknowledged documents, so the cascade must not trust it."""
        return not (self._tantivy_behind or self._keyword_flagged)

    def flush(self) -> None:
        """Commit pending keyword writes and save the vector file (write-lock holder)."""
        with self._lock:
            self._flush_pending_keyword()
            if self._tantivy_behind:
                self._apply_keyword([], [], self._store.seq)
            if self._vectors_enabled and (
                self._unsaved
                or self._vectors_file_stale
                or _read_marker(self._faiss_marker) < self._applied
            ):
                self.save_vectors(self._applied)

    def close(self, *, flush: bool = True) -> None:
        """Release the indexes; ``flush`` first only when holding the write lock."""
        if flush:
            try:
                self.flush()
            except StorageError as exc:  # a full disk: the store has every vector anyway
                logger.warning("closing without saving (%s); the next open catches up", exc)
        if self.faiss is not None:
            self.faiss.close()  # stops a background graph build
            # Let go of it now: its mapped file stays open for as long as the index is
            # referenced, and a closed corpus can be referenced long after (a caller's
            # engine object, reference cycles waiting for the garbage collector).
            self.faiss = None
        self.tantivy.close()

    def _graph_ready(self) -> None:
        """A background HNSW build finished: the next flush saves it (a reopen then
        memory-maps the graph instead of building it again)."""
        with self._lock:
            self._unsaved += 1

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
