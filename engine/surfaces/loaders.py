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

``DocumentFile`` also reads a JSON array of such objects (a file whose first character,
after a byte order mark and white space, is ``[``), as the HTTP upload does with
``application/json``: it is parsed whole, so it is capped at ``MAX_JSON_ARRAY_BYTES``,
and a verdict's ``line`` is then the document's position in the array (1-based).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, cast

from engine import Document, FieldType
from engine.fields import parse_day
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
MAX_JSON_ARRAY_BYTES = 64 * 1024 * 1024
"""A JSON array is parsed whole: past this it is refused (the HTTP upload's cap too)."""
STDIN = "-"
"""The path ``DocumentFile`` reads as standard input."""

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
_SNIFF_BYTES = 4096  # enough to see past a BOM and blank lines to the first character
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
    # The integer limit's text ends in advice for Python programmers, not for the sender.
    return str(exc).partition("; use sys.set_int_max_str_digits")[0] or type(exc).__name__


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
        return parse_day(raw)
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
    # Only a missing or null key means public: false, 0, "" or {} are type errors, not
    # "no groups" (they were read as public).
    groups = [] if raw is None else raw
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
    if not has_id and not has_beir_id:
        raise LineError("missing id (or _id)")
    raw = _numeric_id_as_text(value["id"] if has_id else value["_id"])
    if has_id and has_beir_id and raw != _numeric_id_as_text(value["_id"]):
        raise LineError("both id and _id are present and differ")
    if not isinstance(raw, str):
        raise LineError(f"id must be a string, got {_json_type(raw)}")
    return raw


def _numeric_id_as_text(raw: object) -> object:
    """BEIR-style numeric ids are text: ``12`` is the id ``"12"``."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return str(raw)
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
    """A JSON Lines file (plain or gzip), or a JSON array of documents, read one document
    at a time.

    ``path`` is anything that opens for reading and is not a directory: a file,
    ``/dev/stdin``, a named pipe, a process substitution (``/dev/fd/63``), or ``STDIN``
    (``"-"``) for standard input. Gzip and the array form are told by content, so a
    stream that cannot seek is read once, front to back. ``size`` is the byte size of a
    regular file, 0 when it is not known (a pipe); ``progress()`` reports how many of
    those bytes have been consumed, so a caller can draw a progress bar against it.
    """

    def __init__(self, path: str | Path, fields: Mapping[str, FieldType] = _NO_FIELDS) -> None:
        # Told apart before ``Path`` normalises it: ``Path("./-")`` prints as "-", and
        # ``./-`` is how a person names a file called "-".
        self._stdin = isinstance(path, str) and path == STDIN
        self.path = Path(path)
        self.fields = fields
        self.size = 0
        self._raw: IO[bytes] | None = None
        self._finished = False
        if self.is_stdin:
            with contextlib.suppress(AttributeError, OSError, ValueError):  # no file descriptor
                self.size = _regular_file_size(os.fstat(sys.stdin.buffer.fileno()))
            return
        try:
            info = self.path.stat()
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {self.path}") from None
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(f"{self.path} is a directory")
        self.size = _regular_file_size(info)

    @property
    def is_stdin(self) -> bool:
        """Standard input: the string ``"-"`` was given (not a path that prints as it)."""
        return self._stdin

    def progress(self) -> int:
        """Bytes of the file read so far (all of them once it was read to the end; 0
        while ``size`` is not known)."""
        if self._finished:
            return self.size
        if not self.size or self._raw is None or self._raw.closed:
            return 0
        try:
            return min(self._raw.tell(), self.size)
        except OSError:  # a stream that cannot tell
            return 0

    def __iter__(self) -> Iterator[Loaded | Rejected]:
        with self._open() as raw:
            self._raw = raw
            head, stream = _sniffed(raw, lambda _: False, len(_GZIP_MAGIC))
            if head == _GZIP_MAGIC:
                with gzip.GzipFile(fileobj=stream, mode="rb") as unzipped:
                    yield from _documents(cast(IO[bytes], unzipped), self.fields)
            else:
                yield from _documents(stream, self.fields)
        self._finished = True

    def _open(self) -> contextlib.AbstractContextManager[IO[bytes]]:
        if self.is_stdin:
            if sys.stdin is None:  # started with standard input closed
                raise FileNotFoundError("no standard input to read (it is closed)")
            return contextlib.nullcontext(sys.stdin.buffer)  # not ours to close
        return open(self.path, "rb")


def _regular_file_size(info: os.stat_result) -> int:
    return info.st_size if stat.S_ISREG(info.st_mode) else 0


class _Replay(io.RawIOBase):
    """The bytes ``head``, already read from ``rest``, then the rest of ``rest`` (or the
    error that reading it raised): lets the content of a stream that cannot seek back (a
    pipe) be looked at before it is read."""

    def __init__(self, head: bytes, rest: IO[bytes], error: Exception | None) -> None:
        self._head = head
        self._rest = rest
        self._error = error

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            count = min(len(view), len(self._head))
            view[:count] = self._head[:count]
            self._head = self._head[count:]
            return count
        if self._error is not None:
            raise self._error
        data = _read_some(self._rest, len(view))
        view[: len(data)] = data
        return len(data)


def _read_some(stream: IO[bytes], size: int) -> bytes:
    """What ``stream`` has (at most ``size`` bytes), without waiting for all of them."""
    return cast(bytes, getattr(stream, "read1", stream.read)(size))


def _sniffed(
    stream: IO[bytes], enough: Callable[[bytes], bool], limit: int
) -> tuple[bytes, IO[bytes]]:
    """The first bytes of ``stream`` — read until ``enough`` says so, ``limit`` bytes or
    its end — and a stream that reads all of it from the start. An error met while
    looking (a truncated gzip stream) is raised where the replay reaches it."""
    head, error = b"", None
    try:
        while len(head) < limit and not enough(head):
            chunk = _read_some(stream, limit - len(head))
            if not chunk:
                break
            head += chunk
    except (OSError, EOFError) as exc:
        error = exc
    return head, io.BufferedReader(_Replay(head, stream, error))


def _starts_an_array(head: bytes) -> bool | None:
    """Whether ``head`` begins a JSON array (after a byte order mark and white space);
    ``None`` while it holds too little to tell."""
    if len(head) < len(_UTF8_BOM) and _UTF8_BOM.startswith(head):
        return None
    text = head.removeprefix(_UTF8_BOM).lstrip()
    return text.startswith(b"[") if text else None


def _documents(stream: IO[bytes], fields: Mapping[str, FieldType]) -> Iterator[Loaded | Rejected]:
    head, stream = _sniffed(stream, lambda seen: _starts_an_array(seen) is not None, _SNIFF_BYTES)
    if _starts_an_array(head):
        yield from _array_documents(stream, fields)
    else:
        yield from read_lines(stream, fields)


def _array_documents(
    stream: IO[bytes], fields: Mapping[str, FieldType]
) -> Iterator[Loaded | Rejected]:
    """One verdict per item of a JSON array, numbered by position."""
    try:
        data = stream.read(MAX_JSON_ARRAY_BYTES + 1)
    except (OSError, EOFError) as exc:  # truncated or corrupt gzip stream
        yield Rejected(1, f"unreadable: {exc}")
        return
    if len(data) > MAX_JSON_ARRAY_BYTES:
        cap = MAX_JSON_ARRAY_BYTES // (1024 * 1024)
        yield Rejected(
            1,
            f"a JSON array is read whole, so it is capped at {cap} MiB; give more "
            "documents as JSON Lines (one object per line)",
        )
        return
    try:
        values = json.loads(data)  # bytes: a UTF-8 byte order mark is accepted
    except (ValueError, RecursionError) as exc:
        line = exc.lineno if isinstance(exc, json.JSONDecodeError) else 1
        yield Rejected(line, f"not valid JSON: {json_failure(exc)}")
        return
    yield from array_verdicts(values, fields)


def array_verdicts(
    values: list[object], fields: Mapping[str, FieldType]
) -> Iterator[Loaded | Rejected]:
    """One verdict per item of a parsed JSON array, numbered by position (1-based)."""
    for position, item in enumerate(values, 1):
        try:
            yield Loaded(position, document_from_json(item, fields))
        except LineError as exc:
            yield Rejected(position, str(exc))


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
