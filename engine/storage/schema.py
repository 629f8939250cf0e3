"""The store's schema. ``seq`` orders every write so derived indexes can catch up.

``document_fields`` holds the filterable field values, one row per (document, field,
value): ``value_text`` for keyword fields, ``value_int`` for integer and date fields
(a date as its day number). It is written and deleted in the same transaction as its
document.
"""

from __future__ import annotations

SCHEMA_VERSION = 1

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
    value_int   INTEGER
);
CREATE INDEX IF NOT EXISTS document_fields_doc ON document_fields(source_id);
CREATE INDEX IF NOT EXISTS document_fields_text ON document_fields(name, value_text);
CREATE INDEX IF NOT EXISTS document_fields_text_nocase
    ON document_fields(name, value_text COLLATE NOCASE);
CREATE INDEX IF NOT EXISTS document_fields_int ON document_fields(name, value_int);
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""
