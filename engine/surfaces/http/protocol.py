"""uvicorn's httptools protocol with a cap on a request's head (request line and headers).

httptools, the fast parser uvicorn picks, reads a request's head without any limit: one
anonymous request with a 150 MB header held the server's event loop for ~27 s and grew
it by ~175 MB before the application saw anything. h11 caps the head (16 KiB) but costs
about a millisecond more per request. ``BoundedHeadProtocol`` keeps httptools and answers
431, closing the connection, to any request whose head exceeds ``MAX_HEAD_BYTES``,
whether it arrives in one read or trickles in over many, before the application sees it:

- A read that begins inside a head (a connection's first request, the next one on a
  kept-alive connection) is parsed only up to the cap: if the head has not ended by then,
  it is longer than the cap, whatever the rest of the read holds. This count is exact.
- A head that begins inside a read (pipelined behind another request) is counted as the
  parser reports it — request line, each header's name and value, their separators and
  line ends — and refused as soon as that passes the cap, so a URL past it gets the same
  431 (not the 400 of a URL too long for httptools' URL parser). The count leaves out
  only whitespace the parser skips (runs of spaces in the request line, before a header's
  value) in the read the head began in; from the next read on, the first count holds too.
  (uvicorn logs this refusal as an invalid request.)

It also answers 408 and closes a connection that keeps the server waiting for the client
— nothing sent since it opened, half a head, half a body — for ``CLIENT_WAIT_S`` without
a byte (uvicorn times out only the wait *between* requests): a thousand such connections
held every file descriptor a server had, and every new client was refused. The wait is
measured from the last byte, so a slow upload that keeps sending is never cut; a request
the application is working on is never timed out here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["CLIENT_WAIT_S", "MAX_HEAD_BYTES", "BoundedHeadProtocol"]

CLIENT_WAIT_S = 30.0
"""How long a connection may keep the server waiting for its client's next byte while a
request (or the first one) is incomplete; nginx waits 60 s for a head or body read."""

MAX_HEAD_BYTES = 64 * 1024
"""The longest request line and headers taken: a search URL holding the longest query
(4,096 characters, each up to 4 UTF-8 bytes written as %XX) needs ~48 KiB; nginx allows
32 KiB by default, h11 16 KiB."""

_TOO_LARGE = f"request line and headers longer than {MAX_HEAD_BYTES} bytes".encode("ascii")
_TOO_SLOW = f"no byte from the client for {CLIENT_WAIT_S:g} s".encode("ascii")


def _answer(status: bytes, body: bytes) -> bytes:
    """A whole answer that closes the connection, with the nosniff every answer the app
    writes carries (RequestGuard)."""
    return (
        b"HTTP/1.1 " + status + b"\r\n"
        b"content-type: text/plain; charset=utf-8\r\n"
        b"x-content-type-options: nosniff\r\n"
        b"content-length: " + str(len(body)).encode("ascii") + b"\r\n"
        b"connection: close\r\n\r\n" + body
    )


_ANSWER_431 = _answer(b"431 Request Header Fields Too Large", _TOO_LARGE)
_ANSWER_408 = _answer(b"408 Request Timeout", _TOO_SLOW)
_LINE_FRAMING = len(b"  HTTP/1.1\r\n")
"""A request line's bytes besides its method and URL (two spaces, the version, CRLF)."""
_HEADER_FRAMING = len(b":\r\n")
_HEAD_END = len(b"\r\n")


class _HeadTooLarge(Exception):
    """Raised from a parser callback: the parse stops where the head passed the cap."""


class BoundedHeadProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that answers 431 to a request whose head exceeds
    ``MAX_HEAD_BYTES`` (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # the next bytes begin or continue a request's head
        self._head_read = 0  # bytes that arrived for this head, from a read's start on
        self._head_parsed = 0  # bytes of this head as the parser reported them
        self._too_large = False
        self._in_body = False  # a request's head has arrived, not all of its body
        self._client_wait: asyncio.TimerHandle | None = None
        self._was_waiting_for_100 = False  # the last look found the client awaiting a 100

    # -- waiting for the client ---------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._wait_for_client()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)

    def _wait_for_client(self) -> None:
        self._stop_waiting()
        self._client_wait = self.loop.call_later(CLIENT_WAIT_S, self._client_too_slow)

    def _stop_waiting(self) -> None:
        if self._client_wait is not None:
            self._client_wait.cancel()
            self._client_wait = None

    def _client_too_slow(self) -> None:
        self._client_wait = None
        if self.transport.is_closing():
            return
        if self._server_owes():
            self._wait_for_client()
            return
        cycle = self.cycle
        mid_answer = cycle is not None and cycle.response_started and not cycle.response_complete
        self._close_with(None if mid_answer else _ANSWER_408)

    def _server_owes(self) -> bool:
        """Whether the wait is the server's: the application works on a request (the
        newest one, ``cycle``, or one before those queued in ``pipeline``, their reading
        paused), or the client waits for its ``100 Continue`` — and once that has gone
        out, it gets a whole wait from the next look on."""
        cycle = self.cycle
        if self.pipeline or (
            cycle is not None and not cycle.response_complete and not cycle.more_body
        ):
            return True
        awaiting_100 = cycle is not None and cycle.waiting_for_100_continue
        owed, self._was_waiting_for_100 = awaiting_100 or self._was_waiting_for_100, awaiting_100
        return owed

    # -- counting what the parser reports ---------------------------------------------

    def _count(self, size: int) -> None:
        self._head_parsed += size
        if self._head_parsed > MAX_HEAD_BYTES:
            self._too_large = True
            raise _HeadTooLarge  # httptools stops; uvicorn answers (send_400_response)

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + _HEADER_FRAMING)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._count(len(self.parser.get_method()) + _LINE_FRAMING + _HEAD_END)
        self._in_head = False
        self._in_body = True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_body = False
        self._in_head = True  # what follows begins the next request
        self._head_read = 0
        self._head_parsed = 0

    def send_400_response(self, msg: str) -> None:
        if self._too_large:
            self._refuse()
        else:
            # uvicorn's own 400 (a request line or a header httptools cannot parse) left
            # out the nosniff every other answer carries.
            self._close_with(_answer(b"400 Bad Request", msg.encode("ascii", "replace")))

    # -- counting what arrives ----------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._was_waiting_for_100 = False
        self._received(data)
        if self._in_body or (self._in_head and (self._head_read or self._head_parsed)):
            self._wait_for_client()  # a request is incomplete: the client owes the rest
        else:
            self._stop_waiting()

    def _received(self, data: bytes) -> None:
        room = MAX_HEAD_BYTES - self._head_read
        if not self._in_head or len(data) <= room:
            if self._in_head:
                self._head_read += len(data)
            super().data_received(data)
            return
        # This read reaches past the cap: parse only what the head may take.
        self._head_read = MAX_HEAD_BYTES
        super().data_received(data[:room])
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            return  # answered (an error, a 431) or handed over (a WebSocket upgrade)
        if self._in_head and self._head_read == MAX_HEAD_BYTES:
            self._refuse()  # the same head goes on past the cap
        else:
            self._received(data[room:])  # its body, or the next request from its start

    def _refuse(self) -> None:
        self._close_with(_ANSWER_431)

    def _close_with(self, answer: bytes | None) -> None:
        """Write ``answer`` (if any) and close, unless the connection is closing already."""
        if not self.transport.is_closing():
            if answer is not None:
                self.transport.write(answer)
            self.transport.close()
