"""Stdin lines the MCP SDK cannot parse, made into ones it answers.

The SDK's stdio transport (mcp 2.3) parses each line with pydantic and drops one it
cannot parse without a word (modelcontextprotocol/python-sdk#2751): the client waits
until its own timeout. Valid JSON-RPC that a client may send meets that end: a lone
surrogate escape (``"\\ud800"``, what JavaScript's ``JSON.stringify`` writes for a string
with a broken pair) and nesting deeper than pydantic's limit. ``repairing_stdin`` stands
in for ``sys.stdin`` while the server runs (the SDK reads ``sys.stdin.buffer``): a line
the SDK would refuse is read with Python's json; its lone surrogates become U+FFFD (the
engine clamps a query the same way), and a request still unreadable becomes one of the
same id for a method no server has, which the SDK answers with a JSON-RPC error — an
answer the client can act on. A line that is not JSON at all carries no id to answer and
is left to the SDK.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
import sys
from collections.abc import Iterator
from typing import IO, Any

from mcp.types import jsonrpc_message_adapter

__all__ = ["UNREADABLE_METHOD", "repaired_line", "repairing_stdin"]

logger = logging.getLogger(__name__)

UNREADABLE_METHOD = "tandem/unreadable-request"
"""What a request the SDK cannot read is replaced by (no tool has it: an error answer)."""


def repaired_line(line: bytes) -> bytes:
    """``line`` if the SDK can parse it, else the repair described above."""
    line = _as_one_line(line)
    text = line.decode("utf-8", "replace")
    if _parses(text):
        return line
    try:
        message = json.loads(text)
        candidate = json.dumps(_without_lone_surrogates(message), ensure_ascii=False)
    except (ValueError, RecursionError):
        # Not JSON; or nested past Python's own limit, or a number of more than 4,300
        # digits (each refused by json, though the SDK's parser may take them): the
        # scan below finds a request's id if there is one.
        candidate = ""
    if candidate and _parses(candidate):
        return candidate.encode("utf-8") + b"\n"
    request_id = _request_id(text)
    if request_id is None:
        return line
    stand_in = {"jsonrpc": "2.0", "id": request_id, "method": UNREADABLE_METHOD}
    return json.dumps(stand_in).encode("utf-8") + b"\n"


@contextlib.contextmanager
def repairing_stdin() -> Iterator[None]:
    """``sys.stdin`` reads repaired lines of the real one within this block."""
    original = sys.stdin
    raw = _RepairedLines(original.buffer)
    sys.stdin = io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", errors="replace")
    try:
        yield
    finally:
        sys.stdin = original


_BOM = b"\xef\xbb\xbf"


def _as_one_line(line: bytes) -> bytes:
    """``line`` without what would make the SDK's text reader drop it although it is
    JSON: a leading byte order mark (some Windows pipes write one before the first line),
    and a bare carriage return, which JSON allows as whitespace between tokens (inside a
    string it must be escaped) but the reader's universal newlines take for a line end,
    splitting the request in two unreadable halves."""
    body = line.removesuffix(b"\n").removesuffix(b"\r")
    if not (body.startswith(_BOM) or b"\r" in body):
        return line
    return body.removeprefix(_BOM).replace(b"\r", b" ") + line[len(body) :]  # its own ending


def _parses(text: str) -> bool:
    try:
        jsonrpc_message_adapter.validate_json(text, by_name=False)
    except Exception:  # pydantic's ValidationError, or whatever else refuses the line
        return False
    return True


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_INTEGER = re.compile(r"-?\d+(?![\d.eE])")
_SPACE = re.compile(r"\s*")


def _request_id(text: str) -> str | int | None:
    """The ``id`` of a JSON-RPC request — an object whose top level has a ``method`` and
    a string or integer ``id`` — read by one pass over ``text`` that tracks nesting
    rather than recursing into it (a line nested past any parser's limit still has its
    id near the start). ``None`` for anything else (a notification, a response)."""
    depth, position, found, has_method = 0, 0, None, False
    while position < len(text):
        char = text[position]
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        elif char == '"':
            token = _STRING.match(text, position)
            if token is None:
                return None
            position = _SPACE.match(text, token.end()).end()  # type: ignore[union-attr]
            if depth != 1 or not text.startswith(":", position):
                continue  # a value, or a key inside something nested
            key = token.group()
            position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]
            has_method = has_method or key == '"method"'
            if key == '"id"':
                value = _STRING.match(text, position) or _INTEGER.match(text, position)
                try:
                    found = None if value is None else json.loads(value.group())
                except ValueError:  # a raw control character, a bad escape, 5,000 digits
                    return None
                found = _without_lone_surrogates(found)
            continue
        position += 1
    return found if has_method and text.lstrip().startswith("{") else None


def _without_lone_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        # json.loads joined every valid pair: a surrogate left is a lone one.
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in value)
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {
            _without_lone_surrogates(key): _without_lone_surrogates(item)
            for key, item in value.items()
        }
    return value


class _RepairedLines(io.RawIOBase):
    """The lines of ``source``, each through ``repaired_line``."""

    def __init__(self, source: IO[bytes]) -> None:
        self._source = source
        # The rest of the current line, as a view: slicing bytes on every read copied the
        # rest of the line each time (a 32 MB line took 4 s).
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._pending:
            line = self._source.readline()
            if not line:
                return 0
            try:
                self._pending = memoryview(repaired_line(line))
            except Exception:  # never the server's end: the SDK answers what it can
                logger.warning("an MCP request line could not be checked; passed on as sent")
                self._pending = memoryview(line)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size
