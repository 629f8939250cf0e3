"""uvicorn's httptools protocol with a cap on a request's head (request line and headers).

httptools, the fast parser uvicorn picks, reads a request's head without any limit: one
anonymous request with a 150 MB header held the server's event loop for ~27 s and grew
it by ~175 MB before the application saw anything. h11 caps the head (16 KiB) but costs
about a millisecond more per request. ``BoundedHeadProtocol`` keeps httptools and counts
the bytes that arrive while a head is incomplete: past ``MAX_HEAD_BYTES`` the request is
answered 431 and the connection closed. The count may overshoot by one read (the bytes
of the read that crosses the limit are parsed first), which bounds the memory too.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["MAX_HEAD_BYTES", "BoundedHeadProtocol"]

MAX_HEAD_BYTES = 64 * 1024
"""The longest request line and headers taken: a search URL holding the longest query
(4,096 characters, each up to 4 UTF-8 bytes written as %XX) needs ~48 KiB; nginx allows
32 KiB by default, h11 16 KiB."""

_TOO_LARGE = f"request line and headers longer than {MAX_HEAD_BYTES} bytes".encode("ascii")


class BoundedHeadProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` that answers 431 to a request whose head exceeds
    ``MAX_HEAD_BYTES`` (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # the next bytes begin a request
        self._head_bytes = 0

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
            self.transport.write(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                b"content-type: text/plain; charset=utf-8\r\n"
                b"content-length: " + str(len(_TOO_LARGE)).encode("ascii") + b"\r\n"
                b"connection: close\r\n\r\n" + _TOO_LARGE
            )
            self.transport.close()
