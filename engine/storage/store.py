"""SQLite document store, one per corpus, in WAL mode.

Writes go through one connection under a lock, each call one transaction, and bump a
monotonically increasing ``seq``; when a write method returns, the data is durable
(``synchronous=FULL``). Reads use one connection per thread, so readers never wait for
each other (WAL lets them run beside the writer); ``StoreConnections`` opens and closes
them. Every statement is parameterised.

Several processes may open one store (SQLite's own locking keeps it whole; the engine
serialises writers with its write lock). ``changed()`` tells a thread cheaply whether any
process committed since it last asked — a memory read of the shared ``ChangeCounter``
every write transaction bumps (``PRAGMA data_version`` where that file cannot be had), and
``state()`` / ``read_snapshot()`` say what: the ``seq``, and an ``epoch`` that an
embedder switch bumps.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from engine.errors import StorageError
from engine.storage import field_queries
from engine.storage.change_counter import ChangeCounter
from engine.storage.connections import StoreConnections, changes_path
from engine.storage.field_sql import RowScope
from engine.storage.header_cache import HeaderCache
from engine.storage.records import (
    COLUMNS,
    EmbeddingStatus,
    StoredDocument,
    chunks,
    field_rows,
    row_to_doc,
    select_by_ids,
    with_fields,
)
from engine.storage.schema import has_field_visibility
from engine.storage.state import StoreState
from sparse import FieldFilter, StoredBody


class DocumentStore:
    """The corpus's documents, their access groups and their embedding status."""

    def __init__(self, path: Path, *, read_only: bool = False, existing: bool = False) -> None:
        """``existing``: the store of a corpus that exists — never made anew (see
        ``StoreConnections``)."""
        self._path = path
        self._write_lock = threading.RLock()
        self._headers = HeaderCache()
        self._connections = StoreConnections(path, read_only=read_only, existing=existing)
        self._marked = False  # document_fields rows carry is_public (see ``_fields_marked``)

    @property
    def read_only(self) -> bool:
        return self._connections.read_only

    @property
    def _writer(self) -> sqlite3.Connection:
        return self._connections.writer

    def _reader(self) -> sqlite3.Connection:
        return self._connections.reader()

    def same_file(self) -> bool:
        """False once the store's path names another file or none (the corpus was dropped,
        and perhaps created anew, by another process)."""
        return self._connections.same_file()

    def close(self) -> None:
        self._connections.close(self._write_lock)

    # -- change detection (other connections, other processes) ---------------------------

    def changed(self) -> bool:
        """True when any store — this process's or another process's — committed since
        this thread last asked (first call: True)."""
        handle = self._connections.reader_handle()
        changes = self._connections.changes
        if changes is not None:
            version = changes.value()
        else:
            assert handle.conn is not None
            version = int(handle.conn.execute("PRAGMA data_version").fetchone()[0])
        if version == handle.data_version:
            return False
        if handle.immutable and handle.data_version != -1:
            # ``immutable=1`` (a store no process could write when this thread connected)
            # never sees a commit: one was made, so read the ordinary read-only way.
            handle = self._connections.leave_immutable()
        # An odd counter: a commit in flight, or one whose process died before the counter
        # moved on (see ``change_counter``): remember nothing, look again on every call.
        in_commit = changes is not None and ChangeCounter.in_commit(version)
        handle.data_version = _LOOK_AGAIN if in_commit else version
        return True

    def look_again(self) -> None:
        """Make this thread's next ``changed()`` answer True (a follow that failed half-way
        must be tried again, not forgotten until the next commit)."""
        handle = self._connections.current_handle()
        if handle is not None:
            handle.data_version = _LOOK_AGAIN

    def state(self) -> StoreState:
        """The change counters as committed now (see ``StoreState``)."""
        rows = dict(
            self._reader()
            .execute("SELECT key, value FROM meta WHERE key IN ('seq', 'epoch', 'dropped')")
            .fetchall()
        )
        return StoreState(
            seq=int(rows.get("seq", 0)),
            epoch=int(rows.get("epoch", 0)),
            dropped=rows.get("dropped") == "1",
        )

    @contextlib.contextmanager
    def read_snapshot(self) -> Iterator[StoreState]:
        """Run this thread's reads in one read transaction: everything read inside sees
        the store exactly as of the yielded state (writers go on meanwhile)."""
        conn = self._reader()
        if conn.in_transaction:  # nested: the outer snapshot holds
            yield self.state()
            return
        conn.execute("BEGIN")
        try:
            yield self.state()
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")

    def announce_change(self) -> None:
        """Make every process look at the store's counters on its next search (a new
        writer does this: a writer that died between a commit and its bump is covered)."""
        changes = self._connections.changes
        if changes is not None and self._connections.has_writer:
            changes.bump()

    @property
    def commits(self) -> int:
        """Moves after every write this process commits and whenever
        ``invalidate_caches`` is called (another writer's commits): what a cache of
        anything the store decides, such as which documents are public, compares."""
        return self._headers.generation

    def invalidate_caches(self) -> None:
        """Forget cached reads (call when ``changed()`` reports another writer's commit)."""
        self._headers.invalidate()

    # -- writes -------------------------------------------------------------------------

    def _next_seq(self, conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()
        seq = int(row[0]) + 1
        conn.execute("UPDATE meta SET value = ? WHERE key = 'seq'", (str(seq),))
        return seq

    def upsert(self, docs: Sequence[StoredDocument], model: str | None) -> tuple[int, int]:
        """Insert or replace ``docs`` in one transaction; returns (added, updated)."""
        if not docs:
            return 0, 0
        with self._transaction(f"could not write {len(docs)} documents"):
            seq = self._next_seq(self._writer)
            existing = self._existing(self._writer, [d.source_id for d in docs])
            self._writer.executemany(
                "INSERT INTO documents(source_id, title, text, url, language_id, "
                "access_groups, is_public, page_uid, content_hash, embedding_status, "
                "embedding, embedding_model, seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
                "ON CONFLICT(source_id) DO UPDATE SET title=excluded.title, "
                "text=excluded.text, url=excluded.url, language_id=excluded.language_id, "
                "access_groups=excluded.access_groups, is_public=excluded.is_public, "
                "page_uid=excluded.page_uid, content_hash=excluded.content_hash, "
                "embedding_status=excluded.embedding_status, "
                "embedding=excluded.embedding, embedding_model=excluded.embedding_model, "
                "seq=excluded.seq",
                [
                    (
                        d.source_id,
                        d.title,
                        d.text,
                        d.url,
                        d.language_id,
                        json.dumps(sorted(d.access_groups)),
                        int(d.is_public),
                        d.page_uid,
                        d.content_hash,
                        int(d.embedding_status),
                        None
                        if d.embedding is None
                        else np.ascontiguousarray(d.embedding, np.float32).tobytes(),
                        None if d.embedding is None else model,
                        seq,
                    )
                    for d in docs
                ],
            )
            self._writer.executemany(
                "DELETE FROM tombstones WHERE source_id = ?", [(d.source_id,) for d in docs]
            )
            self._writer.executemany(
                "DELETE FROM document_fields WHERE source_id = ?",
                [(d.source_id,) for d in docs],
            )
            self._writer.executemany(
                "INSERT INTO document_fields(source_id, name, value_text, value_int, "
                "is_public) VALUES (?,?,?,?,?)",
                field_rows(docs),
            )
        added = sum(1 for d in docs if d.source_id not in existing)
        return added, len(docs) - added

    def set_embeddings(
        self, ids: Sequence[str], vectors: npt.NDArray[np.float32], model: str
    ) -> None:
        """Attach vectors to existing documents and mark them embedded."""
        if not ids:
            return
        with self._transaction(f"could not store {len(ids)} vectors"):
            seq = self._next_seq(self._writer)
            self._writer.executemany(
                "UPDATE documents SET embedding = ?, embedding_model = ?, "
                "embedding_status = ?, seq = ? WHERE source_id = ?",
                [
                    (
                        np.ascontiguousarray(v, np.float32).tobytes(),
                        model,
                        int(EmbeddingStatus.EMBEDDED),
                        seq,
                        sid,
                    )
                    for sid, v in zip(ids, vectors, strict=True)
                ],
            )

    def mark_all_degraded(self) -> int:
        """Drop every vector (an embedder switch); returns how many documents changed."""
        with self._transaction("could not reset embeddings"):
            seq = self._next_seq(self._writer)
            cur = self._writer.execute(
                "UPDATE documents SET embedding = NULL, embedding_model = NULL, "
                "embedding_status = ?, seq = ?",
                (int(EmbeddingStatus.DEGRADED), seq),
            )
            # Other processes drop their vectors and re-read the config on a new epoch.
            self._writer.execute(
                "INSERT INTO meta(key, value) VALUES ('epoch', '1') ON CONFLICT(key) "
                "DO UPDATE SET value = CAST(value AS INTEGER) + 1"
            )
        return cur.rowcount

    def mark_dropped(self) -> None:
        """Record that the corpus is being dropped, for processes that still have it open."""
        with self._transaction("could not mark the corpus dropped"):
            self._next_seq(self._writer)
            self._writer.execute(
                "INSERT INTO meta(key, value) VALUES ('dropped', '1') ON CONFLICT(key) "
                "DO UPDATE SET value = '1'"
            )

    def delete(self, ids: Sequence[str]) -> list[str]:
        """Delete documents; returns the ids that existed."""
        if not ids:
            return []
        with self._transaction(f"could not delete {len(ids)} documents"):
            existing = sorted(self._existing(self._writer, ids))
            if existing:
                seq = self._next_seq(self._writer)
                for chunk in chunks(existing):
                    marks = ",".join("?" * len(chunk))
                    self._writer.execute(
                        f"DELETE FROM documents WHERE source_id IN ({marks})", list(chunk)
                    )
                    self._writer.execute(
                        f"DELETE FROM document_fields WHERE source_id IN ({marks})",
                        list(chunk),
                    )
                self._writer.executemany(
                    "INSERT OR REPLACE INTO tombstones(source_id, seq) VALUES (?, ?)",
                    [(sid, seq) for sid in existing],
                )
        return existing

    @contextlib.contextmanager
    def _transaction(self, what: str) -> Iterator[None]:
        """One write transaction under the write lock. SQLite errors become
        ``StorageError``; any exception at all rolls back, so a failed write can never
        leave the connection inside a transaction that poisons the next one."""
        with self._write_lock:
            try:
                self._writer.execute("BEGIN IMMEDIATE")
                yield
                changes = self._connections.changes
                if changes is not None:
                    changes.begin_commit()  # see ``change_counter``: a sequence lock
                try:
                    self._writer.execute("COMMIT")
                finally:
                    self._headers.invalidate()
                    if changes is not None:
                        changes.end_commit()
            except sqlite3.Error as exc:
                self._rollback()
                raise StorageError(f"{what}: {exc}") from exc
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        with contextlib.suppress(sqlite3.Error):  # no transaction may be open
            self._writer.execute("ROLLBACK")

    @staticmethod
    def _existing(conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, str]:
        sql = "SELECT source_id, content_hash FROM documents WHERE source_id IN ({ids})"
        return dict(select_by_ids(conn, sql, list(dict.fromkeys(ids))))

    # -- reads --------------------------------------------------------------------------

    @property
    def identity(self) -> str | None:
        """This store's random name, given at its first writable open (``None``: a store
        of an older version read without one). A derived index file records it, so a
        file from another store is not taken for this one's."""
        row = self._reader().execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
        return None if row is None else str(row[0])

    @property
    def seq(self) -> int:
        row = self._reader().execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()
        return int(row[0])

    def content_state(self, ids: Sequence[str]) -> dict[str, tuple[str, bool]]:
        """For existing ids: (content hash, has a vector)."""
        sql = (
            "SELECT source_id, content_hash, embedding IS NOT NULL FROM documents "
            "WHERE source_id IN ({ids})"
        )
        return {
            sid: (content_hash, bool(has_vec))
            for sid, content_hash, has_vec in select_by_ids(
                self._reader(), sql, list(dict.fromkeys(ids))
            )
        }

    def public_among(self, ids: Sequence[str]) -> list[str]:
        """Those of ``ids`` that are stored and public."""
        sql = "SELECT source_id FROM documents WHERE source_id IN ({ids}) AND +is_public = 1"
        return [str(sid) for (sid,) in select_by_ids(self._reader(), sql, list(dict.fromkeys(ids)))]

    def get_many(self, ids: Sequence[str], *, public_only: bool) -> dict[str, StoredDocument]:
        conn = self._reader()
        # ``+is_public``: keep SQLite on the source_id index for these id look-ups; left to
        # itself it may pick the is_public index and scan every public row.
        public_clause = " AND +is_public = 1" if public_only else ""
        sql = f"SELECT {COLUMNS} FROM documents WHERE source_id IN ({{ids}}){public_clause}"
        found = [row_to_doc(row) for row in select_by_ids(conn, sql, list(dict.fromkeys(ids)))]
        return {doc.source_id: doc for doc in with_fields(conn, found)}

    def headers(
        self,
        ids: Sequence[str],
        *,
        with_text: frozenset[str] = frozenset(),
        filters: Sequence[FieldFilter] = (),
    ) -> dict[str, tuple[str, str, int, str | None]]:
        """Public documents among ``ids`` (that satisfy ``filters``): (title, url,
        language id, text or None).

        Text is read only for ids in ``with_text`` (a document may be a megabyte), in one
        statement with their title, URL and language, so those belong to one version."""
        found: dict[str, tuple[str, str, int, str | None]] = {}
        unique = list(dict.fromkeys(ids))
        generation = -1
        if not filters:  # every search ends here: unfiltered headers are cached
            generation, unique = self._headers.lookup(unique, found)
        if not with_text:  # a keyword page's excerpts come cut: no text to read
            self._read_headers(generation, unique, filters, found)
            return found
        with self.read_snapshot():  # eligibility and text of one version too
            self._read_headers(generation, unique, filters, found)
            bodies = self.public_bodies([sid for sid in with_text if sid in found])
        for sid in with_text:
            body = bodies.get(sid)
            if body is None:
                found.pop(sid, None)  # eligible a moment ago (a cached header), not now
            else:
                found[sid] = tuple(body)  # type: ignore[assignment]
        return found

    def _read_headers(
        self,
        generation: int,
        ids: list[str],
        filters: Sequence[FieldFilter],
        found: dict[str, tuple[str, str, int, str | None]],
    ) -> None:
        found.update(
            field_queries.public_headers(self._reader(), ids, filters, self._public_rows())
        )
        if generation >= 0 and ids:
            self._headers.fill(generation, ids, found)

    def public_bodies(self, ids: Sequence[str]) -> dict[str, StoredBody]:
        """Each public document among ``ids`` as stored now: title, URL, language, text
        (one statement: all of one version)."""
        sql = (
            "SELECT source_id, title, url, language_id, text FROM documents "
            "WHERE source_id IN ({ids}) AND +is_public = 1"
        )
        make = StoredBody._make  # columns as stored: str, str, int, str
        return {
            sid: make((title, url, language_id, text))
            for sid, title, url, language_id, text in select_by_ids(self._reader(), sql, ids)
        }

    def has_public_documents(self) -> bool:
        row = self._reader().execute("SELECT 1 FROM documents WHERE is_public = 1 LIMIT 1")
        return row.fetchone() is not None

    def count(self) -> int:
        return int(self._reader().execute("SELECT COUNT(*) FROM documents").fetchone()[0])

    def count_status(self, status: EmbeddingStatus) -> int:
        return int(
            self._reader()
            .execute("SELECT COUNT(*) FROM documents WHERE embedding_status = ?", (int(status),))
            .fetchone()[0]
        )

    def count_with_vectors(self) -> int:
        """Documents holding a vector: those marked embedded (every write sets the two
        together). Counted through the status index: testing ``embedding IS NOT NULL``
        read every row's vector, 1.5 GB of pages for a million 384-d documents."""
        return self.count_status(EmbeddingStatus.EMBEDDED)

    def vector_dimension(self) -> int | None:
        """The length of the first stored vector in rowid order (the one a rebuild of the
        vector index takes its dimension from); ``None`` when no document holds one."""
        row = (
            self._reader()
            .execute(
                "SELECT length(embedding) FROM documents WHERE embedding_status = ? "
                "ORDER BY rowid LIMIT 1",
                (int(EmbeddingStatus.EMBEDDED),),
            )
            .fetchone()
        )
        return None if row is None or row[0] is None else int(row[0]) // 4

    def count_public(self, status: EmbeddingStatus | None = None) -> int:
        """Public documents (with ``status``: those with that embedding status) — what a
        search can return, and all a public metric may say."""
        sql = "SELECT COUNT(*) FROM documents WHERE is_public = 1"
        params: tuple[int, ...] = ()
        if status is not None:
            sql, params = sql + " AND embedding_status = ?", (int(status),)
        return int(self._reader().execute(sql, params).fetchone()[0])

    def count_non_public(self) -> int:
        return int(
            self._reader()
            .execute("SELECT COUNT(*) FROM documents WHERE is_public = 0")
            .fetchone()[0]
        )

    def degraded_ids(self, limit: int) -> list[str]:
        rows = self._reader().execute(
            "SELECT source_id FROM documents WHERE embedding_status = ? ORDER BY rowid LIMIT ?",
            (int(EmbeddingStatus.DEGRADED), limit),
        )
        return [str(r[0]) for r in rows]

    def public_vector_ids(
        self, language_id: int | None, filters: Sequence[FieldFilter] = ()
    ) -> list[str]:
        """Ids of public documents that have a vector (the dense arm's allow-list),
        optionally of one language and satisfying ``filters``."""
        return field_queries.public_vector_ids(
            self._reader(), language_id, filters, self._public_rows()
        )

    def public_filtered_ids(
        self,
        filters: Sequence[FieldFilter],
        language_id: int | None,
        limit: int,
        offset: int = 0,
    ) -> list[str]:
        """Public documents satisfying ``filters``, in insertion order (a browse)."""
        return field_queries.public_filtered_ids(
            self._reader(), filters, language_id, limit, offset, self._public_rows()
        )

    def keyword_values(self, field: str, value: str, limit: int) -> list[str]:
        """Public documents' values of keyword ``field`` equal to ``value`` ignoring ASCII
        case, or else containing it; at most ``limit``, most frequent first."""
        return field_queries.keyword_values(
            self._reader(), field, value, limit, self._public_rows()
        )

    def iter_documents(self, *, since_seq: int = 0, batch: int = 1000) -> Iterator[StoredDocument]:
        """Documents written after ``since_seq``, in rowid order, read in batches.

        From the start (``since_seq <= 0``) the table is read in rowid order; otherwise
        the changed rows are found through the ``seq`` index first, so catching up after
        a few writes reads those rows only, however large the corpus."""
        conn = self._reader()
        if since_seq <= 0:
            last = -1
            while True:
                rows = conn.execute(
                    f"SELECT {COLUMNS}, rowid FROM documents WHERE seq > ? AND rowid > ? "
                    "ORDER BY rowid LIMIT ?",
                    (since_seq, last, batch),
                ).fetchall()
                if not rows:
                    return
                yield from with_fields(conn, [row_to_doc(row) for row in rows])
                last = int(rows[-1][11])
        changed = [
            int(r[0])
            for r in conn.execute(
                "SELECT rowid FROM documents INDEXED BY documents_seq WHERE seq > ?", (since_seq,)
            )
        ]
        changed.sort()
        for start in range(0, len(changed), batch):
            part = changed[start : start + batch]
            marks = ",".join("?" * len(part))
            rows = conn.execute(
                f"SELECT {COLUMNS}, rowid FROM documents WHERE rowid IN ({marks}) ORDER BY rowid",
                part,
            ).fetchall()
            yield from with_fields(conn, [row_to_doc(row) for row in rows])

    def tombstones_since(self, seq: int) -> list[str] | None:
        """The ids deleted after ``seq`` (and not written since); ``None`` when that
        history was pruned (``prune_tombstones``): whatever reflects the store as of
        ``seq`` must be rebuilt from the documents instead of caught up."""
        conn = self._reader()
        with self.read_snapshot():
            if seq < _pruned_through(conn):
                return None
            rows = conn.execute("SELECT source_id FROM tombstones WHERE seq > ?", (seq,))
            return [str(r[0]) for r in rows]

    def prune_tombstones(self, through: int, *, keep: int) -> int:
        """Forget the deletions made at ``seq`` <= ``through``, but never the newest
        ``keep`` of them; returns how many were forgotten. A catch-up from before the
        pruned point (``tombstones_since`` → ``None``) rebuilds instead: call this with
        the oldest ``seq`` any index file on disk reflects."""
        if keep > 0:
            row = (
                self._reader()
                .execute(
                    "SELECT seq FROM tombstones ORDER BY seq DESC LIMIT 1 OFFSET ?", (keep - 1,)
                )
                .fetchone()
            )
            if row is None:
                return 0  # at most ``keep`` of them (the common case: one indexed read)
            through = min(through, int(row[0]) - 1)  # the keep-th newest's seq stays whole
        older = "SELECT 1 FROM tombstones WHERE seq <= ? LIMIT 1"
        if self._reader().execute(older, (through,)).fetchone() is None:
            return 0  # no write: other processes' caches need not look again
        with self._transaction("could not prune deletions"):
            gone = self._writer.execute("DELETE FROM tombstones WHERE seq <= ?", (through,))
            if gone.rowcount > 0:  # only a forgotten deletion makes a catch-up impossible
                self._writer.execute(
                    "INSERT INTO meta(key, value) VALUES ('tombstones_pruned_through', ?) "
                    "ON CONFLICT(key) DO UPDATE SET "
                    "value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))",
                    (str(through),),
                )
        return gone.rowcount

    def all_ids(self) -> set[str]:
        return {str(r[0]) for r in self._reader().execute("SELECT source_id FROM documents")}

    def field_rows(self, *, public_only: bool) -> RowScope:
        """Which ``document_fields`` rows a filter may read (see ``field_sql``)."""
        if not public_only:
            return RowScope.ALL if self._fields_marked() else RowScope.UNMARKED
        return self._public_rows()

    def _public_rows(self) -> RowScope:
        return RowScope.PUBLIC if self._fields_marked() else RowScope.UNMARKED

    def _fields_marked(self) -> bool:
        # Once true, for good: only a schema 1 store opened read-only asks again (a
        # writable open of it by another process migrates it meanwhile).
        if not self._marked:
            self._marked = has_field_visibility(self._reader())
        return self._marked

    def connection(self) -> sqlite3.Connection:
        """This thread's read-only connection (for the LIKE fallback and grep)."""
        return self._reader()


def announce_change_at(store_path: Path) -> None:
    """Bump the change counter of the store at ``store_path`` without opening the store:
    every process that has it open looks at it on its next read (a drop's last step, so
    that one killed between marking the store and its bump is still seen)."""
    if not changes_path(store_path).is_file():
        return
    with contextlib.suppress(OSError, ValueError):
        counter = ChangeCounter(changes_path(store_path), writable=True)
        try:
            counter.bump()
        finally:
            counter.close()


def _pruned_through(conn: sqlite3.Connection) -> int:
    """The ``seq`` through which deletions were forgotten (-1: none ever were)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'tombstones_pruned_through'").fetchone()
    return -1 if row is None else int(row[0])


_LOOK_AGAIN = -2
"""A reader's remembered change-counter value that no counter holds (-1: never looked)."""
