"""The vector (FAISS) half of a corpus's derived indexes, kept in step with the store.

Every process holds its own in-memory FAISS index. The write-lock holder loads
``vectors.faiss`` at open, catches it up from the store's stored vectors (nothing is
re-embedded) and saves it lazily — on flush/close and after enough unsaved changes: the
vectors are in the store anyway, so a crash costs a cheap catch-up, not data.
``vectors.seq`` records the store ``seq`` the file reflects. Any other process loads the
file and then follows: it applies the store's changes after the ``seq`` it reflects
(tombstones, then changed rows with their stored vectors, in one read transaction).

No lock of its own: ``DerivedIndexes`` calls every method under the corpus's index lock
(the background graph build's callback takes that lock, which is why it is handed in).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dense import FaissIndex, FaissIndexCorrupt, VectorStorage
from engine.errors import StorageError
from engine.storage import DocumentStore, StoredDocument
from engine.write.seq_markers import read_marker, write_marker

logger = logging.getLogger(__name__)

_FAISS_SAVE_EVERY = 20_000  # unsaved vector changes before an eager save ...
_FAISS_SAVE_FRACTION = 4  # ... or a quarter of the index, whichever is larger: each save
# rewrites every vector, so a fixed interval made bulk loads quadratic (1M vectors: ~38 GB
# written); a geometric one keeps them linear. A crash replays at most that many from the
# store on the next open.
_REBUILD_BATCH = 2_000  # stored documents read per FAISS catch-up step


class VectorIndexKeeper:
    """Keeps one process's FAISS index consistent with the store, and its file saved."""

    def __init__(
        self,
        directory: Path,
        store: DocumentStore,
        lock: threading.RLock,
        *,
        search_threads: int | None,
        storage: VectorStorage,
    ) -> None:
        self._store = store
        self._lock = lock
        self._search_threads = search_threads
        self._storage = storage
        self._path = directory / "vectors.faiss"
        self._marker = directory / "vectors.seq"
        self.faiss: FaissIndex | None = None
        self.applied = -1  # the store seq the in-memory index reflects
        self._unsaved = 0
        self._file_stale = False  # vectors.faiss damaged or missing: save soon

    def forget(self) -> None:
        """Every vector was dropped at once (another process switched models)."""
        self.faiss, self.applied = None, -1

    # -- opening ------------------------------------------------------------------------

    def open_as_holder(self) -> None:
        # Saves killed part-way leave their temporary file (named at random, each as
        # large as the index); only the write-lock holder saves, and it holds it now.
        for leftover in self._path.parent.glob(f".{self._path.name}.*.tmp"):
            with contextlib.suppress(OSError):
                leftover.unlink()
        marker = read_marker(self._marker)
        index: FaissIndex | None = None
        if marker >= 0 and self._path.exists():
            try:
                index = FaissIndex.load(
                    self._path, search_threads=self._search_threads, on_graph=self._graph_ready
                )
            except (FaissIndexCorrupt, OSError) as exc:
                # Damage, or a file an older version wrote in another format: either
                # way the store holds every vector. The reason tells which.
                logger.warning(
                    "vector index file cannot be used (%s); rebuilding it from the stored vectors",
                    exc,
                )
                index, marker = None, -1
        else:
            marker = -1
        if index is not None:
            marker = self._file_seq(index, marker)
            if marker < 0:
                index.close()
                index = None
        seq = self._store.seq
        self.faiss = index
        if marker < seq:
            self._catch_up(marker)
            self._save_at_open(seq)
        if self._disagrees_with_store():
            logger.warning("vector index disagrees with the store; rebuilding it")
            self.faiss = None
            self._catch_up(-1)
            self._save_at_open(seq)
        self.applied = seq

    def _save_at_open(self, seq: int) -> None:
        """Save what the open caught up; a full disk leaves the file stale (saved at a
        later flush, or caught up again at the next open), never the corpus unopenable."""
        try:
            self.save(seq)
        except StorageError as exc:
            logger.warning("could not save the caught-up vector index (%s); serving it", exc)
            self._file_stale = True

    def open_following(self) -> None:
        marker = read_marker(self._marker)  # before the file: may only lag
        self.faiss = None
        if marker >= 0 and self._path.exists():
            try:
                self.faiss = FaissIndex.load(self._path, search_threads=self._search_threads)
            except (FaissIndexCorrupt, OSError) as exc:  # as ``open_as_holder`` says it
                logger.warning("vector index file cannot be used (%s); loading stored vectors", exc)
                marker, self._file_stale = -1, True
        if self.faiss is not None:
            marker = self._file_seq(self.faiss, marker)
            if marker < 0:
                self.faiss.close()
                self.faiss, self._file_stale = None, True
        self.applied = marker if self.faiss is not None else -1
        self.follow(verify=True)

    def _file_seq(self, index: FaissIndex, marker: int) -> int:
        """The store ``seq`` the file ``index`` was just loaded from reflects: its own
        record (``FaissIndex.origin``, which ``save`` writes) where it has one — a marker
        can speak for another file, as when an older copy of ``vectors.faiss`` was
        restored alone — else ``marker``. -1 (logged): the file is another store's, or
        ahead of this one; catching it up would keep vectors the store never had."""
        origin = index.origin
        if origin is None:
            return marker  # saved by an older version: the marker is all there is
        seq = origin.get("seq")
        if origin.get("store") != self._store.identity:
            reason = "another store's"
        elif not isinstance(seq, int) or isinstance(seq, bool) or seq > self._store.seq:
            reason = "ahead of its store"
        else:
            return seq
        logger.warning("vector index file is %s; loading the stored vectors instead", reason)
        return -1

    # -- following other processes' writes (no file written) --------------------------------

    def follow(self, *, verify: bool = False) -> None:
        with self._store.read_snapshot() as snapshot:
            if snapshot.seq > self.applied:
                self._catch_up(self.applied)
            if verify and self._disagrees_with_store():
                logger.warning("vector index disagrees with the store; loading stored vectors")
                self.faiss = None
                self._catch_up(-1)
                self._file_stale = True
            self.applied = max(self.applied, snapshot.seq)

    def follow_or_reload(self) -> None:
        try:
            self.follow()
        except ValueError as exc:  # e.g. vectors of another dimension arrived
            logger.warning("vector index could not follow (%s); reloading it", exc)
            self.forget()
            self.follow()

    def replace_damaged(self, index: FaissIndex) -> None:
        """``index`` failed the checksum that runs after opening: load the store's vectors
        instead, and have the file written anew at the next flush."""
        if self.faiss is not index or index.damaged is None:
            return
        logger.warning("vector index file failed its checksum; loading stored vectors")
        index.close()
        self.forget()
        self.follow()
        self._file_stale = True

    def _disagrees_with_store(self) -> bool:
        """The vector index holds another number of vectors than the store, or vectors of
        another length (a file copied from another corpus, or left by a switch of model
        that did not finish): a search would find every query the wrong length."""
        held = 0 if self.faiss is None else len(self.faiss)
        if held != self._store.count_with_vectors():
            return True
        stored = self._store.vector_dimension() if held else None
        return self.faiss is not None and stored is not None and stored != self.faiss.dimension

    def _catch_up(self, since: int) -> None:
        if self.faiss is not None:
            deleted = self._store.tombstones_since(since)
            if deleted is None:
                # The deletions since then were pruned: every stored vector instead
                # (what a fresh open does; the holder saves the file again).
                logger.info("vector index older than the store's kept deletions; reloading")
                self.faiss, since, self._file_stale = None, -1, True
            elif deleted:
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
                self._upsert(ids, np.vstack(vectors))
                ids, vectors = [], []
        if ids:
            self._upsert(ids, np.vstack(vectors))
        if stale and self.faiss is not None:
            self.faiss.remove(stale)
        if self.faiss is not None and len(self.faiss) == 0:
            # Caught up to nothing: its length is no corpus's any more (after another
            # process's switch of model it is the old model's, and the dimension guard
            # would refuse every new vector for it); the next vector makes an index.
            self.faiss = None
        if foreign:
            logger.warning(
                "%d stored vectors have another dimension than the index's %s; "
                "left out of vector search",
                foreign,
                dimension,
            )

    def _upsert(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        if self.faiss is None:
            self.faiss = FaissIndex(
                int(vectors.shape[1]),
                search_threads=self._search_threads,
                storage=self._storage,
                on_graph=self._graph_ready,
            )
        self.faiss.add(list(ids), vectors)

    # -- writes (called after the store committed; write-lock holder) ------------------------

    def apply(self, written: Sequence[StoredDocument], deleted: Sequence[str], seq: int) -> None:
        with_vectors = [d for d in written if d.embedding is not None]
        without = [d.source_id for d in written if d.embedding is None]
        if with_vectors:
            self._upsert(
                [d.source_id for d in with_vectors],
                np.vstack([d.embedding for d in with_vectors if d.embedding is not None]),
            )
        if self.faiss is not None and (without or deleted):
            self.faiss.remove([*without, *deleted])
        self._saved_later(len(written) + len(deleted), seq)

    def apply_vectors(self, ids: Sequence[str], vectors: np.ndarray, seq: int) -> None:
        """A vector-only write at ``seq`` (a repair)."""
        if ids:
            self._upsert(ids, vectors)
        self._saved_later(len(ids), seq)

    def _saved_later(self, changes: int, seq: int) -> None:
        self.applied = seq
        self._unsaved += changes
        held = 0 if self.faiss is None else len(self.faiss)
        if (
            self._unsaved >= max(_FAISS_SAVE_EVERY, held // _FAISS_SAVE_FRACTION)
            or self._file_stale
        ):
            try:
                self.save(seq)
            except StorageError as exc:
                # The write is committed in the store (its vectors too): an eager save is
                # an optimisation, and failing the write over it (a full disk) told the
                # caller that documents it had stored were not. The marker still lags, so
                # the next flush or close saves, or the next open catches up.
                logger.warning("could not save the vector index (%s); saved later", exc)
                self._unsaved = 0

    def drop(self, seq: int) -> None:
        """Forget every vector (an embedder switch, a vector-only write at ``seq``)."""
        self.faiss = None
        self.applied = seq
        self.save(seq)

    def save(self, seq: int) -> None:
        """Persist the vector index and its marker. The vectors are safe in the store
        either way; a failure here (disk full) only means a longer catch-up on open."""
        try:
            try:
                self._save_or_remove_file(seq)
            except FaissIndexCorrupt:
                # Its mapped file changed in place (the save compares what it streams
                # with the file's recorded digests): load the store's vectors, save those.
                if self.faiss is not None:
                    self.replace_damaged(self.faiss)
                self._save_or_remove_file(seq)
            write_marker(self._marker, seq)
        except OSError as exc:
            raise StorageError(f"could not save the vector index: {exc}") from exc
        self._unsaved = 0
        self._file_stale = False

    def _save_or_remove_file(self, seq: int) -> None:
        if self.faiss is not None and len(self.faiss) > 0:
            self.faiss.save(self._path, origin={"store": self._store.identity, "seq": seq})
        else:
            self._path.unlink(missing_ok=True)

    def saved_seq(self) -> int | None:
        """The store ``seq`` ``vectors.faiss`` reflects by its marker; ``None`` when
        there is no file (the next open loads every stored vector: no history needed)."""
        return read_marker(self._marker) if self._path.exists() else None

    def flush(self) -> None:
        """Save the file if anything it should hold is not in it yet."""
        if self._unsaved or self._file_stale or read_marker(self._marker) < self.applied:
            self.save(self.applied)

    def close(self) -> None:
        if self.faiss is not None:
            self.faiss.close()  # stops a background graph build
            # Let go of it now: its mapped file stays open for as long as the index is
            # referenced, and a closed corpus can be referenced long after (a caller's
            # engine object, reference cycles waiting for the garbage collector).
            self.faiss = None

    def _graph_ready(self) -> None:
        """A background HNSW build finished: the next flush saves it (a reopen then
        memory-maps the graph instead of building it again)."""
        with self._lock:
            self._unsaved += 1
