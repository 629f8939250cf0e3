"""Distributed ingest, the read and prepare stages: input becomes wire rows or rejections.

Pure functions (``engine.cluster.ingest`` runs them as Ray Data tasks). ``file_lines``
cuts a JSON Lines file (its bytes; gzip told by content) into lines by the rules of
``tandem add`` (``engine.surfaces.loaders``: lines end at ``\n`` only, each decoded on
its own, a byte order mark dropped, an over-long line rejected unread).
``prepared_batch`` makes every row a ``Document`` by the loaders' rules and checks it as
``Corpus.add`` would (``engine.surfaces.bulk.refusal_of``), or rejects it with its
reason; a row's own vector is checked as the shard will take it; an id repeated within
the batch keeps its last good row; rows already stored with the same content and a
vector are marked skipped, from a lookup the caller supplies (the shard calls stay in
``engine.cluster.ingest``).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from engine.cluster.wire import to_row
from engine.config import FieldType
from engine.documents import Document
from engine.limits import is_valid_source_id
from engine.write.ingest import content_hash, embedding_text

PAYLOAD = "payload"  # a pickled wire row (plain dict)
ID = "id"
TEXT = "embed_text"
VECTOR = "vector"
KIND = "kind"  # "doc", "rejected", "skipped" (stored with this content and a vector),
# "repeated" (its id comes again later in the batch: neither written nor counted)
REASON = "reason"  # why a row was rejected ("" for the others)

StoredLookup = Callable[[Sequence[str]], dict[str, str]]
"""Ids -> content hash of those stored with a vector (the shards' answer)."""

LINE = "text"  # a JSON Lines row: the line's text ...
LINE_ERROR = "error"  # ... or why it has none ("" when it has)
WHERE = "where"  # "<file name> line <n>": names a rejected line that has no valid id


def file_lines(row: dict[str, Any]) -> Iterator[dict[str, str]]:
    """One JSON Lines file (Ray Data's binary read: ``bytes`` and ``path``) → one row per
    non-blank line: its text, or why it cannot be read."""
    from engine.surfaces.loaders import LineError, Rejected, line_text, open_lines, raw_lines

    name = Path(str(row["path"])).name
    for number, line in raw_lines(open_lines(row["bytes"])):
        where = f"{name} line {number}"
        if isinstance(line, Rejected):
            yield {LINE: "", LINE_ERROR: line.reason, WHERE: where}
            continue
        try:
            text = line_text(line)
        except LineError as exc:
            yield {LINE: "", LINE_ERROR: str(exc), WHERE: where}
            continue
        if text.strip():
            yield {LINE: text, LINE_ERROR: "", WHERE: where}


def prepared_batch(
    batch: pa.Table,
    fields: dict[str, FieldType],
    vector_column: str | None,
    dimension: int | None,
    jsonl: bool,
    stored: StoredLookup | None,
) -> pa.Table:
    """Rows → documents (or rejections, with their reasons); an id repeated in the batch
    keeps its last row; with ``stored`` (resume), marks those stored with the same
    content and a vector skipped (not embedded again)."""
    kinds: list[str] = []
    ids: list[str] = []
    reasons: list[str] = []
    digests: list[str] = []
    payloads: list[bytes] = []
    texts: list[str] = []
    vectors: list[list[float] | None] = []
    for item in batch.to_pylist():
        verdict = _verdict(item, fields, vector_column, dimension, jsonl)
        if isinstance(verdict, str):
            kinds.append("rejected")
            ids.append("")
            reasons.append(verdict)
            digests.append("")
            payloads.append(b"")
            texts.append("")
            vectors.append(None)
            continue
        doc, vector = verdict
        if vector is not None:
            dimension = len(vector)  # when unknown, the batch's first good vector's
        kinds.append("doc")
        ids.append(doc.id)
        reasons.append("")
        digests.append(content_hash(doc))
        payloads.append(pickle.dumps(to_row(doc), protocol=pickle.HIGHEST_PROTOCOL))
        texts.append(embedding_text(doc.title, doc.text))
        vectors.append(vector)
    # Last occurrence of a repeated id wins, as in Corpus.add (which counts only it).
    last = {i: n for n, (i, k) in enumerate(zip(ids, kinds, strict=True)) if k == "doc"}
    kinds = [
        "repeated" if k == "doc" and last[i] != n else k
        for n, (i, k) in enumerate(zip(ids, kinds, strict=True))
    ]
    if stored is not None:
        known = stored([i for i, k in zip(ids, kinds, strict=True) if k == "doc"])
        kinds = [
            "skipped" if k == "doc" and known.get(i) == digest else k
            for i, k, digest in zip(ids, kinds, digests, strict=True)
        ]
    columns: dict[str, Any] = {
        KIND: kinds,
        ID: ids,
        REASON: reasons,
        PAYLOAD: pa.array(payloads, type=pa.binary()),
        TEXT: texts,
    }
    if vector_column:
        columns[VECTOR] = pa.array(vectors, type=pa.list_(pa.float32()))
    return pa.table(columns)


def _verdict(
    item: dict[str, Any],
    fields: dict[str, FieldType],
    vector_column: str | None,
    dimension: int | None,
    jsonl: bool,
) -> tuple[Document, list[float] | None] | str:
    """One input row as a document (with its own vector, when the rows bring theirs), or
    why it cannot be one — led by its id when it has a valid one, else by its line."""
    from engine.surfaces.bulk import refusal_of
    from engine.surfaces.loaders import LineError, document_from_json

    named = ""
    try:
        raw = _decoded(item, jsonl)
        named = next((i for i in map(_as_id, (raw.get("id"), raw.get("_id"))) if i), "")
        vector = raw.pop(vector_column, None) if vector_column else None
        doc = document_from_json(raw, fields)
        # What Corpus.add would refuse (a lone surrogate, a float in an integer field):
        # refused here, alone, before it can stand for its id in the batch.
        refusal = refusal_of(doc, fields)
        if refusal is not None:
            return refusal
        if vector_column is None:
            return doc, None
        return doc, checked_vector(vector, vector_column, dimension)
    except LineError as exc:
        where = named or item.get(WHERE, "")
        return f"{where}: {exc}" if where else str(exc)


def _as_id(value: object) -> str:
    """``value`` as the loaders read an id (a string, or an integer), if it is a valid
    one; else ""."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    return value if isinstance(value, str) and is_valid_source_id(value) else ""


def checked_vector(value: object, column: str, dimension: int | None) -> list[float]:
    """A row's own vector, as the shard will take it: a flat list of finite numbers (as
    float32), not all zero, ``dimension`` long (when known); else ``LineError``."""
    from engine.surfaces.loaders import LineError

    if value is None:
        raise LineError(f"no {column!r} value")
    if not isinstance(value, list | tuple) or not all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in value
    ):
        raise LineError(f"{column!r} must be a list of numbers")
    if not value:
        raise LineError(f"{column!r} is empty")
    if dimension is not None and len(value) != dimension:
        raise LineError(
            f"{column!r} has {len(value)} numbers; this corpus's vectors have {dimension}"
        )
    try:
        with np.errstate(over="ignore"):
            array = np.asarray(value, dtype=np.float32)
    except OverflowError:  # an integer past float64's range
        array = np.array([np.inf], dtype=np.float32)
    if not np.isfinite(array).all():
        raise LineError(f"{column!r} contains NaN or infinite values (as float32)")
    if not np.any(array):
        raise LineError(f"{column!r} is all zeros")
    return list(map(float, array))


def _decoded(item: dict[str, Any], jsonl: bool) -> dict[str, Any]:
    """One input row as the loaders take it: a JSON line decoded, or a Parquet row."""
    from engine.surfaces.loaders import LineError, parsed_json

    if not jsonl:
        return _without_nulls(item)
    if item[LINE_ERROR]:
        raise LineError(item[LINE_ERROR])
    value = parsed_json(item[LINE])
    if not isinstance(value, dict):
        raise LineError("expected a JSON object")
    return value


def _without_nulls(raw: dict[str, Any]) -> dict[str, Any]:
    """Parquet fills a key missing from one row with null; the loaders want it absent."""
    out = {k: v for k, v in raw.items() if v is not None}
    nested = out.get("fields")
    if isinstance(nested, dict):
        out["fields"] = {k: v for k, v in nested.items() if v is not None}
    return out
