"""The keyword (tantivy) half of a corpus's derived indexes, kept in step with the store.

``tantivy.seq`` records the store ``seq`` the index holds. The write-lock holder catches
the index files up (replaying the store's changes after the marker) or rebuilds them; any
other process only reloads its reader when the marker moves, and re-reads the marker on
every search while it is behind the store (``pending``); it reloads whenever the marker
file is written again, even at the same ``seq``. A keyword write that failed after the
store committed leaves a ``tantivy.behind`` flag file, and a rebuild writes the marker -1
first: in both cases every process answers keyword searches from the database fallback
(``current`` is False) until the holder has caught the index up.

Bulk writes commit their upserts late (``start_batching``), so a document an add makes
non-public would stay keyword-searchable in its old public version until the add ends,
and be dropped by the store check of every answer meanwhile: short pages. ``withdraw``
deletes such documents (and commits, and rewrites the marker, for other processes)
before the store write that makes them non-public commits; they are then merely absent
from keyword answers, as they will be afterwards. Crash-safe: their ids are written to
``tantivy.withdrawn`` (fsynced) before the delete, and the next holder — at its open, or
when it takes the write lock — puts back those the store still has public (a writer that
died before its store write); a store write that fails puts them back at once
(``end_withdrawal``). The marker never moves back, so a crash costs putting back those
few documents, not a replay from the oldest of them.

No lock of its own: ``DerivedIndexes`` calls every method under the corpus's index lock.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from engine.errors import StorageError
from engine.storage import DocumentStore, StoredDocument
from engine.write.lock import LOCK_FILE, held_by_a_process
from engine.write.seq_markers import (
    Stamp,
    read_ids,
    read_marker,
    read_marker_stamped,
    write_ids,
    write_marker,
)
from sparse import SparseDocument, SparseError, TantivyIndex

logger = logging.getLogger(__name__)

_KEYWORD_BATCH = 20_000  # documents per tantivy commit in bulk writes and rebuilds: a
# commit costs ~40 ms plus merges whatever its size, so one per 512-document store chunk
# made commits three quarters of keyword ingest time


def _to_sparse(doc: StoredDocument) -> SparseDocument:
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


class KeywordIndexKeeper:
    """Keeps one corpus's tantivy index consistent with its store, across processes."""

    def __init__(self, directory: Path, store: DocumentStore, tantivy: TantivyIndex) -> None:
        self.tantivy = tantivy
        self._store = store
        self._marker = directory / "tantivy.seq"
        self._behind_flag = directory / "tantivy.behind"
        self._damaged_flag = directory / "tantivy.damaged"  # a search could not read it
        self._withdrawn_file = directory / "tantivy.withdrawn"
        self._write_lock = directory / LOCK_FILE
        self._behind = False  # this process's keyword write failed: catch up before the next
        self._flagged = False  # behind flag, or a rebuild running elsewhere
        self._disagrees = False  # opened (not holding) an index whose count is wrong
        self._seen = -1  # tantivy.seq when the tantivy reader last reloaded
        self._seen_stamp: Stamp | None = None  # ... and the marker file it was read from
        self._withdrawn: list[str] | None = None  # for the store write under way
        self._batched: list[SparseDocument] | None = None  # inside a bulk write
        self._batched_seq = -1
        self.pending = False  # tantivy.seq behind the store: re-read it per search

    @property
    def current(self) -> bool:
        """False while a failed keyword-index write is waiting to be caught up (here or
        in another process), or while it is being rebuilt: the index then lacks
        acknowledged documents, so the cascade must not trust it."""
        return not (self._behind or self._flagged or self._disagrees)

    # -- the write-lock holder ------------------------------------------------------------

    def open(self) -> None:
        """Catch the index files up to the store, or rebuild them. A failure is contained:
        the store still answers through the database fallback; the next write retries."""
        try:
            self._open()
        except (SparseError, OSError) as exc:
            self._failed(exc, "unavailable at open")

    def _open(self) -> None:
        self.tantivy.remove_temp_files()  # a killed commit's, never listed anywhere
        marker = read_marker(self._marker)
        existed = (self.tantivy.path / "meta.json").is_file()
        if marker < 0 or not existed or not self.tantivy.is_available() or self._damaged():
            self._rebuild()
            return
        seq = self._store.seq
        if marker > seq:
            # The index holds writes the store does not: the store was restored from an
            # older copy. Its documents are the truth (and the counts may still agree).
            logger.warning("keyword index ahead of the store (a store restored?); rebuilding")
            self._rebuild()
            return
        if marker < seq:
            try:
                # A writer that died mid-commit (why the marker is behind) left files that
                # would make the catch-up's first write fail and rebuild the whole index.
                self.tantivy.collect_garbage()
                caught_up = self._catch_up(marker)
            except SparseError as exc:
                logger.warning(
                    "tantivy catch-up failed (%s); rebuilding from the store",
                    type(exc.__cause__ or exc).__name__,
                )
                self._rebuild()
                return
            if not caught_up:
                logger.info("keyword index older than the store's kept deletions; rebuilding")
                self._rebuild()
                return
        self.tantivy.commit()  # reload: another process may have committed since
        self._put_back_withdrawn()
        # Public documents only (``TantivyIndex.upsert``): an index built before that
        # rule, holding non-public ones, disagrees here and is rebuilt once.
        if self.tantivy.doc_count() != self._store.count() - self._store.count_non_public():
            logger.warning("keyword index disagrees with the store; rebuilding it")
            self._rebuild()
            return
        self._mark(seq)

    def _catch_up(self, since: int) -> bool:
        """Replay the store's changes after ``since`` (-1: every document, into an empty
        index). False, with nothing done, when the deletions since then were pruned."""
        if since >= 0:
            deleted = self._store.tombstones_since(since)
            if deleted is None:
                return False
            if deleted:
                self.tantivy.delete(deleted)
        batch: list[SparseDocument] = []
        for doc in self._store.iter_documents(since_seq=since):
            batch.append(_to_sparse(doc))
            if len(batch) >= _KEYWORD_BATCH:
                self.tantivy.upsert(batch)
                batch = []
        if batch:
            self.tantivy.upsert(batch)
        return True

    def saved_seq(self) -> int:
        """The store ``seq`` the index files on disk reflect (-1: being rebuilt)."""
        return read_marker(self._marker)

    def _rebuild(self) -> None:
        seq = self._store.seq
        logger.info("rebuilding the keyword index from the store")
        write_marker(self._marker, -1)  # other processes: not usable meanwhile
        self.tantivy.clear()
        self._catch_up(-1)
        self._mark(seq)
        self._withdrawn_file.unlink(missing_ok=True)  # every public document is back
        self._damaged_flag.unlink(missing_ok=True)  # every segment is new

    def _damaged(self) -> bool:
        return self._damaged_flag.exists()

    def note_unreadable(self) -> None:
        """A search could not read the index files (a damaged segment: the index opens,
        its counts agree, and every search that reads the segment fails). Every process
        answers keyword searches from the database fallback from now on — this one at once,
        others at their next follow — until the write-lock holder, at the next write or
        writable open, rebuilds the index from the store. Safe without the index lock."""
        if not self._store.same_file():
            return  # dropped meanwhile (its files went): not damage, nor this path's now
        self._flagged = True
        self.pending = True  # every search follows the flag: a rebuild elsewhere shows
        if self._damaged():
            return
        logger.warning("keyword index cannot be read; rebuilt at the next write or open")
        try:
            self._damaged_flag.touch()
        except OSError:
            logger.warning("could not flag the keyword index as damaged")

    def _put_back_withdrawn(self) -> None:
        """A withdrawal whose writer died before its store write (``tantivy.withdrawn``
        left behind): index again those of its documents the store still has public."""
        ids = read_ids(self._withdrawn_file)
        if ids is None:
            return
        back = self._put_back(ids)
        if back:
            logger.info("put %d withdrawn documents back in the keyword index", back)
        self._forget_withdrawn_list()

    def _put_back(self, ids: Sequence[str]) -> int:
        """Index again those of ``ids`` the store has public now — read, not assumed: a
        store write that raised after its commit made them non-public after all, and
        those must stay out. Returns how many."""
        back = self._store.get_many(ids, public_only=True)
        if back:
            self.tantivy.upsert([_to_sparse(d) for d in back.values()])
        return len(back)

    def _forget_withdrawn_list(self) -> None:
        try:
            self._withdrawn_file.unlink(missing_ok=True)
        except OSError:  # left: the next holder puts back nothing public, and tries again
            logger.debug("could not remove %s", self._withdrawn_file.name)

    def _mark(self, seq: int) -> None:
        """The keyword index holds everything up to ``seq``: say so, to every process."""
        self._write_marker(seq)
        self._behind = self._flagged = self._disagrees = False
        self._behind_flag.unlink(missing_ok=True)

    def _write_marker(self, seq: int) -> None:
        """Write the marker (every process reloads its reader at a write, see ``follow``)."""
        self._seen_stamp = write_marker(self._marker, seq)
        self._seen = seq

    def _failed(self, exc: BaseException, what: str) -> None:
        self._behind = True
        if self._batched:
            # The catch-up replays from the marker, which no batched write has moved past:
            # flushed on their own, they would move it past what the failure lost.
            self._batched = []
        try:
            self._behind_flag.touch()
        except OSError:
            logger.warning("could not flag the keyword index as behind")
        logger.warning("keyword index %s (%s); will catch up", what, type(exc).__name__)

    def repair(self, seq: int) -> None:
        """Catch the index files up to ``seq`` (or rebuild them) if they lag, were flagged
        behind or are missing. Call ``follow`` first: the last holder's commits show."""
        if (
            self._seen >= seq
            and not self._behind
            and not self._flagged
            and self.tantivy.is_available()
            and not self._withdrawn_file.exists()  # a withdrawal's writer died
            and not self._damaged()
            and not self._disagrees  # seen at a non-holder open: counted again, rebuilt
        ):
            return
        self._behind = True  # replays from the marker (or rebuilds)
        self.apply([], [], seq)

    # -- a store write about to make public documents non-public ----------------------------

    def withdraw(self, public: Sequence[str]) -> None:
        """Delete these documents — public in the store now — from the index and commit,
        before the store write that makes them non-public commits (see the module
        docstring). One tantivy commit and one marker write, at the same ``seq``. If
        their list cannot be written first, nothing is withdrawn: the index stays as it
        was (and pages may come back short until the add ends, as before withdrawals)."""
        if not public or self._behind:
            return  # (behind: not searched, and the catch-up replays every write)
        marker = read_marker(self._marker)
        if marker < 0:
            return  # being rebuilt: not searched either
        try:
            write_ids(self._withdrawn_file, public)
        except OSError as exc:
            logger.warning("could not note documents to withdraw (%s); keeping them", exc)
            return
        self._withdrawn = list(public)
        try:
            self.tantivy.delete(self._withdrawn)
            self._write_marker(marker)  # the same seq: other processes reload at the write
        except (SparseError, OSError) as exc:
            self._failed(exc, "withdrawal failed")  # the catch-up puts them back

    def end_withdrawal(self, *, stored: bool) -> None:
        """The store write after ``withdraw`` ended. ``stored``: it committed, and the
        documents are non-public now (absent from the index, as they should be). Else put
        back what the store still has public."""
        withdrawn, self._withdrawn = self._withdrawn, None
        if withdrawn is None or self._behind:
            return  # (behind: the catch-up puts them back from ``tantivy.withdrawn``)
        if not stored:
            try:
                self._put_back(withdrawn)
                self._write_marker(self._seen)  # other processes reload at the write
            except (SparseError, OSError, StorageError, sqlite3.Error) as exc:
                self._failed(exc, "could not put withdrawn documents back")
                return
        self._forget_withdrawn_list()

    # -- writes (called after the store committed) -------------------------------------------

    def apply(self, written: Sequence[StoredDocument], deleted: Sequence[str], seq: int) -> None:
        """Mirror one committed store write. A failure is contained: the write is durable
        in the store (findable through the database fallback); the index catches up on the
        next write or the next open."""
        if not self._behind and self._damaged():
            self._behind = True  # rebuilt by ``_open`` below, this write included
        batched = self._batched
        if batched is not None and not deleted and not self._behind:
            batched.extend(_to_sparse(d) for d in written)
            self._batched_seq = seq
            if len(batched) >= _KEYWORD_BATCH:
                self._flush_batched()
            return
        self._flush_batched()  # keep the order of writes
        try:
            if self._behind:
                self._open()  # replays this write too
                self._behind = False
                return
            if deleted:
                self.tantivy.delete(deleted)
            if written:
                self.tantivy.upsert([_to_sparse(d) for d in written])
            self._mark(seq)
        except BaseException as exc:
            self._write_failed(exc)

    def start_batching(self) -> None:
        """Hold upserts until ``_KEYWORD_BATCH`` documents or ``stop_batching``: durable
        in the store meanwhile, not yet keyword-searchable."""
        self._batched = []

    def stop_batching(self) -> None:
        try:
            self._flush_batched()
        finally:
            self._batched = None

    def _flush_batched(self) -> None:
        batched = self._batched
        if not batched:
            return
        self._batched = []
        try:
            self.tantivy.upsert(batched)
            self._mark(self._batched_seq)
        except BaseException as exc:
            self._write_failed(exc)

    def _write_failed(self, exc: BaseException) -> None:
        """A keyword write that did not finish: behind (searches answer from the database
        until the next write catches the index up). An index error is contained; anything
        else — Ctrl-C in the middle of a commit, how a notebook stops a long add — is
        raised again, but only once the index is marked: taken for current, it lacked
        thousands of stored documents."""
        if isinstance(exc, SparseError | OSError):
            self._failed(exc, "write failed")
            return
        self._failed(exc, "write interrupted")
        raise exc

    def unchanged_at(self, seq: int) -> None:
        """The store's write ``seq`` changed no keyword content: a keyword index current at
        the write before (each write is one ``seq``) is current at this one too. Without
        the marker moving, the next write-lock holder took the index for lagging and
        replayed every document the write touched — all of them after a switch — while
        this process's searches, told the index was not current, went without their
        keyword arm."""
        if self._behind or self._flagged:
            return
        if self._batched:
            # Upserts still batched (inside a bulk write, e.g. an add that heals after
            # writing): the flush marks this write's seq, as current as the one before.
            if self._batched_seq == seq - 1:
                self._batched_seq = seq
            return
        if self._seen == seq - 1:
            try:
                self._mark(seq)
            except OSError:  # the marker only lags: the next holder replays, as before
                logger.debug("could not move the keyword marker past a vector-only write")

    def flush(self) -> None:
        """Commit batched writes; catch up a failed one (write-lock holder)."""
        self._flush_batched()
        if self._behind:
            self.apply([], [], self._store.seq)

    # -- following other processes' writes (no file written) --------------------------------

    def check_counts(self) -> None:
        """At an open that does not hold the write lock, after ``follow``: the check the
        holder makes at its open, without the rebuild it may not make. An index that
        claims the store's ``seq`` but does not hold its public documents (one built by a
        version that indexed non-public documents too, whose words then moved the order
        of public hits) is not searched — the database answers — until the marker moves
        (a holder's rebuild or write)."""
        if self._flagged or self.pending or self._withdrawn_file.exists():
            return  # (a withdrawal under way: its documents are out of the index already)
        try:
            seq = self._store.seq
            if seq != self._seen:
                return  # a write is under way: the index holds what it has committed
            public = self._store.count() - self._store.count_non_public()
            indexed = self.tantivy.doc_count()
            if self._store.seq != seq:
                return  # a write committed meanwhile: the counts are of two moments
        except (SparseError, OSError, StorageError, sqlite3.Error) as exc:
            logger.debug("keyword index count check failed (%s)", type(exc).__name__)
            return
        self._disagrees = indexed != public
        if self._disagrees:
            self.pending = True  # every search looks for the holder's rebuild
            logger.warning(
                "keyword index disagrees with the store; searching the database until a "
                "writable open rebuilds it"
            )

    def follow(self, followed_seq: int) -> None:
        """Reload the reader if the marker moved; note whether it lags ``followed_seq``
        (the store seq this process's view last followed)."""
        marker, stamp = read_marker_stamped(self._marker)
        if (marker != self._seen or stamp != self._seen_stamp) and marker >= 0:
            try:
                self.tantivy.commit()  # reload: every commit before the marker shows
                self._seen, self._seen_stamp = marker, stamp
                self._disagrees = False  # a holder wrote it, after its own count check
            except (SparseError, OSError) as exc:
                logger.debug("keyword index reload failed (%s)", type(exc).__name__)
        lagging = marker < followed_seq
        withdrawn = self._withdrawn_file.exists()
        self._flagged = (
            marker < 0
            # A failed withdrawal leaves the flag without a lag (the marker stays put):
            # the withdrawn list beside it says the index lacks documents the store has
            # public.
            or (self._behind_flag.exists() and (lagging or withdrawn))
            # So does the list of a withdrawal whose writer died before its store write:
            # no process holds the write lock that the withdrawing one holds throughout.
            or (withdrawn and not held_by_a_process(self._write_lock))
            or self._damaged()
        )
        # While flagged, every search follows: a rebuild by another process's writable
        # open moves no store seq, and nothing else would make this one look again.
        self.pending = (
            lagging
            or (self._seen, self._seen_stamp) != (marker, stamp)
            or self._flagged
            or self._disagrees
        )

    def close(self) -> None:
        self.tantivy.close()
