"""Reading documents from JSON Lines files, one verdict per line.

Accepted: plain or gzip-compressed (detected by content, not by name) JSON Lines where
each line is an object with ``id`` (or BEIR's ``_id``), and optionally ``title``,
``text``, ``url``, ``language_id`` and ``access_groups``. Values of the corpus's declared
filter fields come from a ``fields`` object (``{"fields": {"year": 1942}}``) or from
top-level keys named like a declared field (``{"year": 1942}``); a date field takes
``YYYY-MM-DD`` text. A BEIR ``corpus.jsonl(.gz)`` is that format already; other keys
(BEIR's ``metadata``) are ignored. Blank lines are skipped, and so is a UTF-8 byte order
mark at the start of the first line. A line that is not such an object becomes a
``Rejected`` with its line number and a reason — the rest of the file is still read. The
documented caps (``engine.limits``) are checked here, so a bad line rarely costs a
refused batch; the engine checks again at ``add`` (see ``engine.surfaces.bulk``).
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from engine import Document, FieldType
from engine.limits import (
    MAX_ACCESS_GROUPS,
    MAX_DOCUMENT_CHARS,
    MAX_LANGUAGE_ID,
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
    SOURCE_ID_RULE,
    is_valid_source_id,
)

MAX_LINE_BYTES = 16 * 1024 * 1024
"""A line longer than this is rejected unread (a document's text is capped far below it)."""

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
_STRING_CAPS = {"title": MAX_TITLE_CHARS, "text": MAX_DOCUMENT_CHARS, "url": MAX_URL_CHARS}
_MAX_GROUP_CHARS = 128
DOCUMENT_KEYS = frozenset(
    {"id", "_id", "title", "text", "url", "language_id", "access_groups", "fields", "metadata"}
)
"""The keys of a line that are the document itself, never a filter field's value."""
_NO_FIELDS: Mapping[str, FieldType] = {}


@dataclass(frozen=True, slots=True)
class Rejected:
    """One line that could not become a document."""

    line: int
    reason: str


@dataclass(frozen=True, slots=True)
class Loaded:
    """One line that became a document."""

    line: int
    document: Document


class LineError(ValueError):
    """Why one decoded JSON value is not a document (the message is the reason)."""


def json_failure(exc: ValueError | RecursionError) -> str:
    """Why ``json.load``/``json.loads`` refused a text, in words for the sender.

    Besides ``JSONDecodeError`` it raises ``UnicodeDecodeError`` (bytes that are not
    UTF-8), ``RecursionError`` (nesting past the interpreter's limit) and a plain
    ``ValueError`` whose text says what is wrong (an integer over the 4,300-digit
    conversion limit).
    """
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 (JSON text is UTF-8)"
    if isinstance(exc, RecursionError):
        return "too deeply nested"
    return str(exc) or type(exc).__name__


def document_from_json(value: object, fields: Mapping[str, FieldType] = _NO_FIELDS) -> Document:
    """Turn one decoded JSON value into a ``Document`` or raise ``LineError``.

    ``fields`` are the target corpus's declared filter fields: their values are read from
    the line (dates parsed from ``YYYY-MM-DD``); the engine checks the types at ``add``.
    """
    if not isinstance(value, dict):
        raise LineError(f"expected a JSON object, got {_json_type(value)}")
    raw_id = _pick_id(value)
    if not is_valid_source_id(raw_id):
        raise LineError(f"id must be {SOURCE_ID_RULE}")
    strings = {name: _string(value, name, cap) for name, cap in _STRING_CAPS.items()}
    if any(_is_control(ch) for ch in strings["url"]):
        raise LineError("url contains control characters")
    language_id = value.get("language_id", 0)
    if language_id is None:
        language_id = 0
    if isinstance(language_id, bool) or not isinstance(language_id, int):
        raise LineError(f"language_id must be an integer, got {_json_type(language_id)}")
    if not 0 <= language_id <= MAX_LANGUAGE_ID:
        raise LineError(f"language_id must be in 0..{MAX_LANGUAGE_ID}")
    groups = _groups(value.get("access_groups"))
    return Document(
        id=str(raw_id),
        title=strings["title"],
        text=strings["text"],
        url=strings["url"],
        language_id=language_id,
        access_groups=frozenset(groups),
        fields=_field_values(value, fields),
    )


def _field_values(value: dict[str, object], declared: Mapping[str, FieldType]) -> dict[str, Any]:
    nested = value.get("fields")
    if nested is None:
        nested = {}
    if not isinstance(nested, dict):
        raise LineError(f"fields must be a JSON object, got {_json_type(nested)}")
    out: dict[str, Any] = dict(nested)  # values are type-checked by the engine at add
    for name in declared:
        if name in value and name not in DOCUMENT_KEYS:
            if name in out:
                raise LineError(f"field {name!r} is given twice (top level and in fields)")
            out[name] = value[name]
    for name, raw in out.items():
        if declared.get(name) is FieldType.DATE:
            out[name] = _dates(name, raw)
    return out


def _dates(name: str, raw: object) -> object:
    if isinstance(raw, list):
        return [_date(name, item) for item in raw]
    return _date(name, raw)


def _date(name: str, raw: object) -> object:
    if not isinstance(raw, str):
        return raw  # the engine names the type problem
    try:
        return dt.date.fromisoformat(raw)
    except ValueError:
        raise LineError(f"field {name!r} is a date field: values must be YYYY-MM-DD") from None


def _string(value: dict[str, object], name: str, cap: int) -> str:
    field = value.get(name)
    if field is None:
        return ""
    if not isinstance(field, str):
        raise LineError(f"{name} must be a string, got {_json_type(field)}")
    if len(field) > cap:
        raise LineError(f"{name} has {len(field)} characters; the cap is {cap}")
    if "\x00" in field:
        raise LineError(f"{name} contains a NUL character")
    return field


def _groups(raw: object) -> list[str]:
    groups = raw or []
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise LineError("access_groups must be a list of strings")
    if len(groups) > MAX_ACCESS_GROUPS:
        raise LineError(f"access_groups has {len(groups)} entries; the cap is {MAX_ACCESS_GROUPS}")
    if not all(0 < len(g) <= _MAX_GROUP_CHARS and not any(map(_is_control, g)) for g in groups):
        raise LineError(
            f"access_groups entries must be 1-{_MAX_GROUP_CHARS} characters, no control characters"
        )
    return groups


def _is_control(ch: str) -> bool:
    return ord(ch) < 32 and ch not in "\t\n\r"


def _pick_id(value: dict[str, object]) -> object:
    has_id, has_beir_id = "id" in value, "_id" in value
    if has_id and has_beir_id and value["id"] != value["_id"]:
        raise LineError("both id and _id are present and differ")
    if not has_id and not has_beir_id:
        raise LineError("missing id (or _id)")
    raw = value["id"] if has_id else value["_id"]
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)  # BEIR-style numeric ids
    if not isinstance(raw, str):
        raise LineError(f"id must be a string, got {_json_type(raw)}")
    return raw


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "an object",
    }.get(type(value), type(value).__name__)


class _LineSource(Protocol):
    def readline(self, size: int = -1, /) -> bytes: ...


class DocumentFile:
    """A JSON Lines file (plain or gzip) read line by line.

    ``progress()`` reports how many bytes of the file on disk have been consumed, so a
    caller can draw a progress bar against ``size``.
    """

    def __init__(self, path: str | Path, fields: Mapping[str, FieldType] = _NO_FIELDS) -> None:
        self.path = Path(path)
        self.fields = fields
        if not self.path.is_file():
            raise FileNotFoundError(f"no such file: {self.path}")
        self.size = self.path.stat().st_size
        self._raw: IO[bytes] | None = None
        self._finished = False

    def progress(self) -> int:
        """Bytes of the file read so far (all of them once it was read to the end)."""
        if self._finished:
            return self.size
        if self._raw is None or self._raw.closed:
            return 0
        return self._raw.tell()

    def __iter__(self) -> Iterator[Loaded | Rejected]:
        with open(self.path, "rb") as raw:
            self._raw = raw
            compressed = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            if compressed:
                with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                    yield from read_lines(unzipped, self.fields)
            else:
                yield from read_lines(raw, self.fields)
        self._finished = True


def read_lines(
    stream: _LineSource,
    fields: Mapping[str, FieldType] = _NO_FIELDS,
    *,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> Iterator[Loaded | Rejected]:
    """One verdict per non-blank line of ``stream`` (a binary file-like object)."""
    for number, line in raw_lines(stream, max_line_bytes=max_line_bytes):
        if isinstance(line, Rejected):
            yield line
        else:
            yield from _parse_line(number, line, fields)


def open_lines(data: bytes) -> _LineSource:
    """A JSON Lines file's bytes as a line source: gunzipped as it is read when they are
    gzip-compressed (told by content, not by name)."""
    stream = io.BytesIO(data)
    return gzip.GzipFile(fileobj=stream, mode="rb") if data[:2] == _GZIP_MAGIC else stream


def raw_lines(
    stream: _LineSource, *, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[tuple[int, bytes | Rejected]]:
    """Each line of ``stream`` as bytes, with its number — the first one without a UTF-8
    byte order mark — or a ``Rejected`` for a line past ``max_line_bytes`` (skipped
    unread) and, last, for a stream that cannot be read on (a truncated gzip file)."""
    number = 0
    while True:
        try:
            chunk = stream.readline(max_line_bytes + 1)
        except (OSError, EOFError) as exc:  # truncated or corrupt gzip stream
            yield number + 1, Rejected(number + 1, f"unreadable: {exc}")
            return
        if not chunk:
            return
        number += 1
        if len(chunk) > max_line_bytes and not chunk.endswith(b"\n"):
            _skip_rest_of_line(stream, max_line_bytes)
            yield number, Rejected(number, f"line is longer than {max_line_bytes} bytes")
            continue
        if number == 1 and chunk.startswith(_UTF8_BOM):
            # Windows editors write one; json.loads refuses it in a str, while a JSON
            # array upload (decoded from bytes) accepts it, so a line file does too.
            chunk = chunk[len(_UTF8_BOM) :]
        yield number, chunk


def line_text(chunk: bytes) -> str:
    """A line's text; ``LineError`` when it is not UTF-8."""
    try:
        return chunk.decode("utf-8")
    except UnicodeDecodeError:
        raise LineError("not valid UTF-8") from None


def parsed_json(text: str) -> object:
    """A line's JSON value; ``LineError`` naming the failure when it is not JSON."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise LineError(f"not valid JSON: {json_failure(exc)}") from None


def _skip_rest_of_line(stream: _LineSource, max_line_bytes: int) -> None:
    while True:
        chunk = stream.readline(max_line_bytes)
        if not chunk or chunk.endswith(b"\n"):
            return


def _parse_line(
    number: int, chunk: bytes, fields: Mapping[str, FieldType]
) -> Iterator[Loaded | Rejected]:
    try:
        text = line_text(chunk)
        if not text.strip():
            return
        yield Loaded(number, document_from_json(parsed_json(text), fields))
    except LineError as exc:
        yield Rejected(number, str(exc))
