"""``POST .../documents``: a JSON array or an NDJSON stream, one verdict per document.

The body is streamed into a spooled temporary file (memory up to a small size, then
disk), checked against the upload cap and, for NDJSON, the line cap *while it arrives*.
Only a body that passed both is parsed and added — so a refused upload writes nothing.
Documents are then read one line at a time and added in batches; a document the engine
refuses is reported with its line (or array position) and reason, like ``tandem add``.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import IO

from engine import FieldType
from engine.surfaces.bulk import BulkReport
from engine.surfaces.http.caps import human_bytes, too_large
from engine.surfaces.http.errors import ApiError, invalid_json
from engine.surfaces.loaders import (
    MAX_JSON_ARRAY_BYTES,
    Loaded,
    Rejected,
    array_verdicts,
    read_lines,
)

__all__ = ["NDJSON_TYPES", "Upload", "is_ndjson", "parse_upload", "report_body", "spool"]

NDJSON_TYPES = frozenset(
    {
        "application/x-ndjson",
        "application/ndjson",
        "application/jsonl",
        "application/x-jsonlines",
        "application/jsonlines",
    }
)
_IN_MEMORY_BYTES = 1024 * 1024
MAX_REPORTED_REJECTIONS = 1_000


def is_ndjson(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media in NDJSON_TYPES:
        return True
    if media in ("", "application/json") or media.endswith("+json"):
        return False
    raise ApiError(
        415,
        "unsupported_media_type",
        "send documents as application/json (an array) or application/x-ndjson (one "
        "object per line)",
    )


class Upload:
    """A spooled request body (closed with ``close``)."""

    def __init__(self, file: IO[bytes], size: int, ndjson: bool) -> None:
        self.file = file
        self.size = size
        self.ndjson = ndjson

    def close(self) -> None:
        self.file.close()


async def spool(
    chunks: AsyncIterator[bytes], *, ndjson: bool, max_bytes: int, max_line_bytes: int
) -> Upload:
    """Copy the body to a temporary file, enforcing the body and (NDJSON) line caps."""
    file = tempfile.SpooledTemporaryFile(max_size=_IN_MEMORY_BYTES)  # noqa: SIM115
    size = 0
    line = 1
    line_bytes = 0
    try:
        async for chunk in chunks:
            size += len(chunk)
            if size > max_bytes:
                raise too_large(max_bytes, "upload")
            if not ndjson and size > MAX_JSON_ARRAY_BYTES:
                raise ApiError(
                    413,
                    "body_too_large",
                    f"a JSON array upload is parsed whole, so it is capped at "
                    f"{human_bytes(MAX_JSON_ARRAY_BYTES)}; send larger uploads as NDJSON "
                    "(Content-Type application/x-ndjson), which is read line by line",
                )
            if ndjson:
                start = 0
                while (end := chunk.find(b"\n", start)) >= 0:
                    line_bytes += end - start
                    _check_line(line, line_bytes, max_line_bytes)
                    line, line_bytes, start = line + 1, 0, end + 1
                line_bytes += len(chunk) - start
                _check_line(line, line_bytes, max_line_bytes)
            file.write(chunk)
    except BaseException:
        file.close()
        raise
    file.seek(0)
    return Upload(file, size, ndjson)


def _check_line(number: int, size: int, cap: int) -> None:
    if size > cap:
        raise ApiError(
            413,
            "line_too_long",
            f"NDJSON line {number} is longer than {human_bytes(cap)}, the cap per document "
            "line; nothing was added",
        )


def parse_upload(upload: Upload, fields: Mapping[str, FieldType]) -> Iterator[Loaded | Rejected]:
    """One verdict per document of the spooled body (blocking: run it on a thread)."""
    if upload.ndjson:
        yield from read_lines(upload.file, fields, max_line_bytes=upload.size + 1)
        return
    try:
        value = json.load(upload.file)
    except (ValueError, RecursionError) as exc:
        raise invalid_json(exc) from None
    if not isinstance(value, list):
        raise ApiError(
            422,
            "invalid_request",
            "expected a JSON array of documents (or NDJSON with Content-Type application/x-ndjson)",
        )
    yield from array_verdicts(value, fields)


def report_body(report: BulkReport) -> dict[str, object]:
    return {
        "added": report.added,
        "updated": report.updated,
        "unchanged": report.unchanged,
        "degraded": report.degraded,
        "rejected": [
            {"line": r.line, "reason": r.reason} for r in report.rejected[:MAX_REPORTED_REJECTIONS]
        ],
        "rejected_total": report.rejected_total,
    }
