"""A bounded HTTP transport for the Ollama clients: a time limit and a size limit per call.

httpx's timeouts bound each connect, read and write on its own, never a whole call: a
server that sends its answer a few bytes at a time, each within the read timeout, keeps a
call going for as long as it likes, and a body of hundreds of megabytes is read and
decoded in full before anyone looks at it. Both clients in Tandem that talk to Ollama
(``dense.ollama``, ``engine.natural``) are built by ``bounded_client``: the body must
have arrived within ``timeout_s`` of the request and may not exceed ``max_bytes``; past
either, its next chunk raises (``httpx.ReadTimeout``, ``ResponseTooLarge``), which
``dense.ollama_errors`` describes like any other remote failure. The client asks for an
uncompressed answer (Ollama sends no other) and refuses a compressed one, whose size on
the wire would say nothing about its size once decoded.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import ollama

from dense.hosts import split_credentials

__all__ = ["MAX_SHOW_BYTES", "ResponseTooLarge", "bounded_client"]

MAX_SHOW_BYTES = 16 << 20
"""The most a health check reads of ``/api/show``'s answer (a model's details, its
template and licence: tens of kilobytes)."""


class ResponseTooLarge(httpx.TransportError):
    """The server's answer is longer than the call allows."""

    def __init__(self, limit: int, *, request: httpx.Request) -> None:
        super().__init__(f"the answer is longer than {limit} bytes", request=request)
        self.limit = limit


def bounded_client(host: str, *, timeout_s: float, max_bytes: int) -> ollama.Client:
    """An ``ollama.Client`` whose every call reads at most ``max_bytes`` of body and ends
    within about ``2 × timeout_s``: the headers must come within ``timeout_s`` of silence
    (httpx's read timeout), the body is dropped at its first chunk after ``timeout_s``
    from the request, and no wait for a chunk lasts longer than ``timeout_s``.

    Credentials in ``host`` (``http://user:secret@proxy:11434``, percent-encoded as in
    any URL) are sent as HTTP Basic authentication: the ``ollama`` client rebuilds its
    base URL from the host name alone and would drop them."""
    address, credentials = split_credentials(host)
    return ollama.Client(
        host=address,
        timeout=timeout_s,
        headers={"Accept-Encoding": "identity"},
        transport=_BoundedTransport(timeout_s, max_bytes),
        auth=None if credentials is None else httpx.BasicAuth(*credentials),
    )


class _BoundedTransport(httpx.BaseTransport):
    def __init__(self, timeout_s: float, max_bytes: int) -> None:
        self._inner = httpx.HTTPTransport()
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = time.monotonic() + self._timeout_s
        response = self._inner.handle_request(request)
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            response.close()
            raise httpx.DecodingError(
                "the answer is compressed, though an uncompressed one was asked for",
                request=request,
            )
        stream = response.stream
        assert isinstance(stream, httpx.SyncByteStream)  # the sync transport's kind
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_BoundedBody(stream, request, deadline, self._timeout_s, self._max_bytes),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()


class _BoundedBody(httpx.SyncByteStream):
    def __init__(
        self,
        inner: httpx.SyncByteStream,
        request: httpx.Request,
        deadline: float,
        timeout_s: float,
        max_bytes: int,
    ) -> None:
        self._inner = inner
        self._request = request
        self._deadline = deadline
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes

    def __iter__(self) -> Iterator[bytes]:
        received = 0
        for chunk in self._inner:
            received += len(chunk)
            if received > self._max_bytes:
                raise ResponseTooLarge(self._max_bytes, request=self._request)
            if time.monotonic() > self._deadline:
                raise httpx.ReadTimeout(
                    f"the answer took longer than {self._timeout_s:g} s", request=self._request
                )
            yield chunk

    def close(self) -> None:
        self._inner.close()
