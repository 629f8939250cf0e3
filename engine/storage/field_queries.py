"""The store's reads that select documents by their filterable fields.

Each takes the calling thread's read connection; the conditions come from
``field_sql.filter_sql``, so every value is a bound parameter.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from engine.storage.field_sql import RowScope, filter_sql
from engine.storage.records import like_escape, select_by_ids
from sparse import FieldFilter


def public_headers(
    conn: sqlite3.Connection, ids: Sequence[str], filters: Sequence[FieldFilter], rows: RowScope
) -> dict[str, tuple[str, str, int, str | None]]:
    """(title, url, language id, None) of the public documents among ``ids`` that
    satisfy ``filters``."""
    found: dict[str, tuple[str, str, int, str | None]] = {}
    where, filter_params = filter_sql(filters, rows=rows)
    for sid, title, url, language_id in select_by_ids(
        conn,
        "SELECT source_id, title, url, language_id FROM documents "
        f"WHERE source_id IN ({{ids}}) AND +is_public = 1 AND {where}",
        ids,
        filter_params,
    ):
        found[sid] = (title, url, int(language_id), None)
    return found


def public_vector_ids(
    conn: sqlite3.Connection,
    language_id: int | None,
    filters: Sequence[FieldFilter],
    rows: RowScope,
) -> list[str]:
    """See ``DocumentStore.public_vector_ids``."""
    where, params = filter_sql(filters, rows=rows)
    sql = (
        f"SELECT source_id FROM documents WHERE is_public = 1 AND embedding IS NOT NULL AND {where}"
    )
    if language_id is not None:
        sql += " AND language_id = ?"
        params.append(language_id)
    return [str(r[0]) for r in conn.execute(sql, params)]


def public_filtered_ids(
    conn: sqlite3.Connection,
    filters: Sequence[FieldFilter],
    language_id: int | None,
    limit: int,
    offset: int,
    rows: RowScope,
) -> list[str]:
    """See ``DocumentStore.public_filtered_ids``."""
    where, params = filter_sql(filters, rows=rows)
    sql = f"SELECT source_id FROM documents WHERE is_public = 1 AND {where}"
    if language_id is not None:
        sql += " AND language_id = ?"
        params.append(language_id)
    sql += " ORDER BY rowid LIMIT ? OFFSET ?"
    params += [limit, offset]
    return [str(r[0]) for r in conn.execute(sql, params)]


def keyword_values(
    conn: sqlite3.Connection, field: str, value: str, limit: int, rows: RowScope
) -> list[str]:
    """See ``DocumentStore.keyword_values``: exact (ASCII case-insensitive) matches if
    there are any, else values containing ``value`` — among public documents' values
    only (a value only non-public documents carry must not be revealed, nor confirmed)."""
    scope = rows.sql("f.is_public")
    for condition, pattern in (
        ("f.value_text = ? COLLATE NOCASE", value),
        ("f.value_text LIKE ? ESCAPE '\\'", f"%{like_escape(value)}%"),
    ):
        found = conn.execute(
            "SELECT f.value_text, COUNT(*) AS n FROM document_fields AS f "
            "JOIN documents AS d ON d.source_id = f.source_id AND d.is_public = 1 "
            f"WHERE f.name = ? AND {scope}f.value_text IS NOT NULL AND {condition} "
            "GROUP BY f.value_text ORDER BY n DESC, f.value_text LIMIT ?",
            (field, pattern, limit),
        ).fetchall()
        if found:
            return [str(r[0]) for r in found]
    return []
