"""The store's row types and the helpers that turn rows into them."""

from __future__ import annotations

import dataclasses
import enum
import json
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

SQL_VARS = 500  # ids per IN (...) chunk; well under SQLite's variable limit


class EmbeddingStatus(enum.IntEnum):
    NOT_REQUIRED = 0  # the corpus has vectors off
    EMBEDDED = 1
    DEGRADED = 2  # embedding failed or is pending; keyword-searchable meanwhile


@dataclass(frozen=True, slots=True)
class StoredDocument:
    source_id: str
    title: str
    text: str
    url: str
    language_id: int
    access_groups: frozenset[str]
    page_uid: int | None
    content_hash: str
    embedding_status: EmbeddingStatus
    embedding: npt.NDArray[np.float32] | None = None
    seq: int = 0
    fields: tuple[tuple[str, str | int], ...] = ()
    """Encoded filterable values, sorted ``(field, value)`` pairs (see ``engine.fields``)."""

    @property
    def is_public(self) -> bool:
        return not self.access_groups


COLUMNS = (
    "source_id, title, text, url, language_id, access_groups, page_uid, content_hash, "
    "embedding_status, embedding, seq"
)


def like_escape(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def row_to_doc(row: Any) -> StoredDocument:
    blob = row[9]
    return StoredDocument(
        source_id=str(row[0]),
        title=str(row[1]),
        text=str(row[2]),
        url=str(row[3]),
        language_id=int(row[4]),
        access_groups=frozenset(json.loads(str(row[5]))),
        page_uid=None if row[6] is None else int(row[6]),
        content_hash=str(row[7]),
        embedding_status=EmbeddingStatus(int(row[8])),
        embedding=None if blob is None else np.frombuffer(blob, dtype=np.float32),
        seq=int(row[10]),
    )


def chunks(items: Sequence[str], size: int = SQL_VARS) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def select_by_ids(
    conn: sqlite3.Connection, sql: str, ids: Sequence[str], params: Sequence[object] = ()
) -> Iterator[Any]:
    """The rows of ``sql`` for ``ids``, read a chunk of ids per statement (SQLite caps
    bound variables). ``sql`` holds ``{ids}`` where the ``?`` marks go; ``params`` bind
    after the ids."""
    for chunk in chunks(ids):
        marks = ",".join("?" * len(chunk))
        yield from conn.execute(sql.replace("{ids}", marks), [*chunk, *params])


def field_rows(
    docs: Sequence[StoredDocument],
) -> list[tuple[str, str, str | None, int | None, int]]:
    """``document_fields`` rows: (source id, name, text value, integer value, is_public)."""
    return [
        (d.source_id, name, value, None, int(d.is_public))
        if isinstance(value, str)
        else (d.source_id, name, None, value, int(d.is_public))
        for d in docs
        for name, value in d.fields
    ]


def with_fields(conn: sqlite3.Connection, docs: list[StoredDocument]) -> list[StoredDocument]:
    """Attach each document's field values (one query per chunk of ids)."""
    found: dict[str, list[tuple[str, str | int]]] = {}
    try:
        for sid, name, text, number in select_by_ids(
            conn,
            "SELECT source_id, name, value_text, value_int FROM document_fields "
            "WHERE source_id IN ({ids})",
            [d.source_id for d in docs],
        ):
            found.setdefault(sid, []).append(
                (str(name), str(text) if text is not None else int(number))
            )
    except sqlite3.OperationalError as exc:
        # A store written before filterable fields, opened read-only: the table comes with
        # the first writable open, and until then no document has a field value.
        if "no such table: document_fields" not in str(exc):
            raise
        return docs
    if not found:
        return docs
    return [
        dataclasses.replace(d, fields=tuple(sorted(found[d.source_id], key=repr)))
        if d.source_id in found
        else d
        for d in docs
    ]


class ReaderHandle:
    """One thread's read connection. Threads come and go (HTTP servers, pools): when a
    thread ends, its thread-local handle is collected and the connection closed with it."""

    __slots__ = ("__weakref__", "conn", "data_version", "immutable")

    def __init__(self, conn: sqlite3.Connection, *, immutable: bool = False) -> None:
        self.conn: sqlite3.Connection | None = conn
        self.data_version = -1  # SQLite's ``PRAGMA data_version`` when last looked at
        self.immutable = immutable  # opened with ``immutable=1``: blind to later writes

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def __del__(self) -> None:
        self.close()
