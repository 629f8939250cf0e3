"""Documents on the wire: plain rows between the coordinator, Ray Data and shard actors.

``engine.Document`` keeps its ``fields`` in a read-only ``MappingProxyType``, which does
not pickle; a row is a plain ``dict`` with the same keys, rebuilt into a ``Document``
(and validated again by ``Corpus.add``) on the shard.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.documents import Document

Row = dict[str, Any]


def to_row(doc: Document) -> Row:
    fields: dict[str, object] = {}
    for name, value in doc.fields.items():
        # A field's several values travel as a list; any other value as it is (the
        # engine names a value of the wrong type, where list() of it would raise here).
        fields[name] = list(value) if isinstance(value, list | tuple | set | frozenset) else value
    return {
        "id": doc.id,
        "title": doc.title,
        "text": doc.text,
        "url": doc.url,
        "language_id": doc.language_id,
        "access_groups": sorted(doc.access_groups),
        "page_uid": doc.page_uid,
        "fields": fields,
    }


def from_row(row: Mapping[str, Any]) -> Document:
    return Document(
        id=row["id"],
        title=row.get("title", ""),
        text=row.get("text", ""),
        url=row.get("url", ""),
        language_id=row.get("language_id", 0),
        access_groups=frozenset(row.get("access_groups") or ()),
        page_uid=row.get("page_uid"),
        fields=dict(row.get("fields") or {}),
    )
