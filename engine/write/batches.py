"""What ``Corpus.add`` and ``Corpus.delete`` check before they touch anything.

A batch is refused whole: if one document or id is invalid, nothing is written, and the
``InvalidArgument`` names what was wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from engine.config import FieldType
from engine.documents import Document, is_utf8_encodable, validate_document
from engine.errors import InvalidArgument
from engine.fields import encode_fields
from engine.limits import MAX_BATCH_SIZE, MAX_SOURCE_ID_CHARS
from engine.write.ingest import Vectors, checked_vectors


def checked_documents(
    documents: Iterable[Document],
    declared: Mapping[str, FieldType],
    embeddings: object | None,
    *,
    vectors_enabled: bool,
) -> tuple[list[Document], Vectors | None]:
    """The batch's validated documents, one per id, and the supplied vectors (if any)
    for those documents in the same order."""
    if isinstance(documents, Document):
        raise InvalidArgument("add takes a list of Documents, not a single Document")
    if isinstance(documents, Mapping):  # iterated, it gave its keys: "got str"
        raise InvalidArgument("add takes a list of Documents, not a dict (use Document(**d))")
    docs = _as_list(documents, "add takes an iterable of Documents")
    if len(docs) > MAX_BATCH_SIZE:
        raise InvalidArgument(f"{len(docs)} documents in one add; the cap is {MAX_BATCH_SIZE}")
    docs = [validate_document(d) for d in docs]
    for doc in docs:  # refuse undeclared fields and wrong types before storing anything
        encode_fields(doc.id, doc.fields, declared)
    supplied = None
    if embeddings is not None:
        if not vectors_enabled:
            raise InvalidArgument("embeddings given, but this corpus has vectors off")
        supplied = checked_vectors(embeddings, len(docs))
    # Last occurrence of a repeated id wins, as it would across separate calls.
    last = {d.id: i for i, d in enumerate(docs)}
    keep = sorted(last.values())
    docs = [docs[i] for i in keep]
    if supplied is not None:
        supplied = supplied[keep]
    return docs, supplied


def checked_ids(ids: Iterable[str]) -> list[str]:
    """The ids of a delete, as a list; a lone string is refused (it would iterate by
    character)."""
    if isinstance(ids, str | bytes):
        raise InvalidArgument("delete takes a collection of ids, not a single string")
    wanted = _as_list(ids, "delete takes a collection of ids")
    if len(wanted) > MAX_BATCH_SIZE:
        raise InvalidArgument(f"{len(wanted)} ids in one delete; the cap is {MAX_BATCH_SIZE}")
    for sid in wanted:
        if not isinstance(sid, str) or len(sid) > MAX_SOURCE_ID_CHARS or not is_utf8_encodable(sid):
            raise InvalidArgument("ids must be UTF-8 strings of at most 256 characters")
    return wanted


def _as_list(values: object, refusal: str) -> list[Any]:
    """``values`` as a list; something that is not iterable (``None``, a number) is the
    caller's mistake, said in the engine's words rather than Python's ``TypeError``."""
    try:
        items = iter(values)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgument(f"{refusal}, got {type(values).__name__}") from None
    return list(items)
