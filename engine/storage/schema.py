"""The store's schema. ``seq`` orders every write so derived indexes can catch up.

``document_fields`` holds the filterable field values, one row per (document, field,
value): ``value_text`` for keyword fields, ``value_int`` for integer and date fields
(a date as its day number), and its document's ``is_public``. It is written and deleted in
the same transaction as its document. A filter looks values up through the ``(name,
is_public, value)`` indexes, so what it costs depends on the public documents that carry
a value, never on the non-public ones (with the visibility only in ``documents``, an
allow-list query read every carrier's row: its time told how many private documents held
a value).

Schema 1 stores (before the column) get it on their first writable open: ``migrate``
adds it, copies each row's visibility from its document and swaps the indexes, in one
transaction.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 2

SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    rowid            INTEGER PRIMARY KEY,
    source_id        TEXT NOT NULL UNIQUE,
    title            TEXT NOT NULL,
    text             TEXT NOT NULL,
    url              TEXT NOT NULL,
    language_id      INTEGER NOT NULL,
    access_groups    TEXT NOT NULL,
    is_public        INTEGER NOT NULL,
    page_uid         INTEGER,
    content_hash     TEXT NOT NULL,
    embedding_status INTEGER NOT NULL,
    embedding        BLOB,
    embedding_model  TEXT,
    seq              INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS documents_seq ON documents(seq);
CREATE INDEX IF NOT EXISTS documents_status ON documents(embedding_status);
CREATE INDEX IF NOT EXISTS documents_public ON documents(is_public, language_id);
CREATE TABLE IF NOT EXISTS tombstones (
    source_id TEXT PRIMARY KEY,
    seq       INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tombstones_seq ON tombstones(seq);
CREATE TABLE IF NOT EXISTS document_fields (
    source_id   TEXT NOT NULL,
    name        TEXT NOT NULL,
    value_text  TEXT,
    value_int   INTEGER,
    is_public   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS document_fields_doc ON document_fields(source_id);
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""

FIELD_INDEXES = (
    "CREATE INDEX IF NOT EXISTS document_fields_public_text "
    "ON document_fields(name, is_public, value_text)",
    "CREATE INDEX IF NOT EXISTS document_fields_public_text_nocase "
    "ON document_fields(name, is_public, value_text COLLATE NOCASE)",
    "CREATE INDEX IF NOT EXISTS document_fields_public_int "
    "ON document_fields(name, is_public, value_int)",
    """CREATE TRIGGER IF NOT EXISTS document_fields_visibility
    AFTER INSERT ON document_fields WHEN NEW.is_public = 0
BEGIN
    UPDATE document_fields SET is_public = 1 WHERE rowid = NEW.rowid
        AND EXISTS (SELECT 1 FROM documents WHERE source_id = NEW.source_id AND is_public = 1);
END""",
)
"""The value indexes, created once ``document_fields.is_public`` exists, and the trigger
that keeps the column right for writers that do not know it. A process of an older
version (the README says to stop it first; a rolling restart does not) inserts field
rows without ``is_public``, so they read ``DEFAULT 0`` — hidden from filters although
their document is public; the trigger, part of the schema and so fired by every writer,
copies the document's flag into such a row (an upsert writes the document first). This
version's rows of public documents say 1 and skip it."""

OLD_INDEXES = ("document_fields_text", "document_fields_text_nocase", "document_fields_int")
"""Schema 1's value indexes. Dropped by the migration; an older version's process
creates them again when it opens the store, so an open checks for them."""


def has_field_visibility(conn: sqlite3.Connection) -> bool:
    """Whether the store's ``document_fields`` rows carry ``is_public`` (false for a
    schema 1 store not yet opened for writing by this version, or one without the
    table)."""
    columns = conn.execute("PRAGMA table_info(document_fields)").fetchall()
    return any(str(column[1]) == "is_public" for column in columns)


def migrate(conn: sqlite3.Connection) -> None:
    """Bring a store whose tables ``SCHEMA`` has made sure of — new (no
    ``schema_version`` yet) or an older version's — to ``SCHEMA_VERSION``, in one write
    transaction (another process opening the store at
    the same moment waits for it, then finds nothing left to do). A store already there
    is not written to (an open stays a read)."""
    if _current(conn):
        return
    stamped = _stamped(conn)
    if stamped > SCHEMA_VERSION:
        # A newer version's store: left as it is (its stamp too); this version reads and
        # writes what it knows of it, as it would a config field it does not know.
        logger.warning("store schema %d is newer than this version's %d", stamped, SCHEMA_VERSION)
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not has_field_visibility(conn):
            conn.execute(
                "ALTER TABLE document_fields ADD COLUMN is_public INTEGER NOT NULL DEFAULT 0"
            )
        # Every row from before the column, or an older version wrote before the trigger:
        conn.execute(
            "UPDATE document_fields SET is_public = 1 WHERE is_public = 0 AND source_id IN "
            "(SELECT source_id FROM documents WHERE is_public = 1)"
        )
        for statement in FIELD_INDEXES:
            conn.execute(statement)
        for index in OLD_INDEXES:
            conn.execute(f"DROP INDEX IF EXISTS {index}")
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('schema_version', ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (str(SCHEMA_VERSION),),
        )
        conn.execute("COMMIT")
    except BaseException as exc:
        with contextlib.suppress(sqlite3.Error):  # BEGIN itself may have failed
            conn.execute("ROLLBACK")
        if is_store_full(exc):
            # The whole change goes through the write-ahead log first: about the store's
            # size again (measured: a 34 MB store, a 34 MB log, 48 MB after it).
            logger.warning(
                "store schema %d -> %d: no room for the migration, rolled back (it needs "
                "about the store's size free, %.0f MiB)",
                stamped,
                SCHEMA_VERSION,
                _size_bytes(conn) / 2**20,
            )
        raise


def is_store_full(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's ``SQLITE_FULL`` (any extended code): no room to write."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_FULL


def _size_bytes(conn: sqlite3.Connection) -> int:
    with contextlib.suppress(sqlite3.Error):
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        return int(pages) * int(conn.execute("PRAGMA page_size").fetchone()[0])
    return 0


def _current(conn: sqlite3.Connection) -> bool:
    """Whether there is nothing to do: this version's stamp, the column, the trigger, and
    none of schema 1's indexes (an older version's process puts them back)."""
    if _stamped(conn) != SCHEMA_VERSION or not has_field_visibility(conn):
        return False
    names = {
        str(r[0])
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE tbl_name = 'document_fields' "
            "AND type IN ('index', 'trigger')"
        )
    }
    return "document_fields_visibility" in names and not names.intersection(OLD_INDEXES)


def _stamped(conn: sqlite3.Connection) -> int:
    """The store's ``schema_version`` (0 for a new store, not stamped yet)."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        return 0 if row is None else int(row[0])
    except ValueError:
        return 0
