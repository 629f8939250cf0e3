"""``BoundedHeadProtocol`` read by read: exactly which heads get 431, whatever the reads.

The protocol is driven in process with a fake transport, each ``data_received`` call one
read of the socket, so a test says exactly how the bytes arrive (``test_http_serve.py``
sends the same requests to the real server over TCP, where the reads are the kernel's).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from engine.surfaces.http.protocol import MAX_HEAD_BYTES, BoundedHeadProtocol

LINE = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    while scope["method"] == "POST" and (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False
        self.protocol: asyncio.BaseProtocol | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def statuses(reads: Sequence[bytes]) -> tuple[list[int], bool]:
    """The status of every answer to ``reads`` (one ``data_received`` each), and whether
    the connection was closed."""

    async def run() -> FakeTransport:
        protocol = BoundedHeadProtocol(uvicorn.Config(_ok, log_level="critical"), ServerState(), {})
        transport = FakeTransport()
        transport.protocol = protocol
        protocol.connection_made(transport)
        for data in reads:
            if transport.closed:
                break
            protocol.data_received(data)
            await asyncio.sleep(0.01)  # the application answers what was complete
        return transport

    transport = asyncio.run(run())
    found = [
        int(line.split()[1])
        for line in transport.written.split(b"\r\n")
        if line.startswith(b"HTTP/1.1 ")
    ]
    return found, transport.closed


def request(extra: bytes = b"") -> bytes:
    return LINE + extra + b"\r\n"


def padded(size: int) -> bytes:
    """A GET whose head is ``size`` bytes, one header making up the length."""
    head = request(b"X-Padding: " + b"a" * (size - len(request(b"X-Padding: \r\n"))) + b"\r\n")
    assert len(head) == size
    return head


def split(data: bytes, *at: int) -> list[bytes]:
    cuts = [0, *at, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(cuts)]


TOO_LARGE = [
    pytest.param([padded(MAX_HEAD_BYTES + 1)], id="one-byte-over-in-one-read"),
    pytest.param([request(b"X-P: " + b"a" * 70_000 + b"\r\n")], id="70000-byte-header-one-read"),
    pytest.param(
        split(request(b"X-A: " + b"a" * 40_000 + b"\r\nX-B: " + b"b" * 30_000 + b"\r\n"), 40_040),
        id="40000-then-30000",
    ),
    pytest.param(
        [request(b"".join(b"X-H%d: " % i + b"h" * 1_000 + b"\r\n" for i in range(70)))],
        id="many-1KB-headers",
    ),
    pytest.param([b"GET /healthz?q=" + b"u" * 70_000 + b" HTTP/1.1\r\n\r\n"], id="long-url"),
    pytest.param(split(padded(MAX_HEAD_BYTES + 1), 30_000, 60_000), id="over-in-three-reads"),
    pytest.param(
        [padded(1 << 20)[i : i + 16_384] for i in range(0, 1 << 20, 16_384)], id="trickled-1MB"
    ),
    pytest.param([request(b"X-P:" + b" " * 70_000 + b"a\r\n")], id="whitespace-the-parser-skips"),
]


@pytest.mark.parametrize("reads", TOO_LARGE)
def test_a_head_past_the_cap_is_431_and_closed(reads: list[bytes]) -> None:
    assert statuses(reads) == ([431], True)


FITS = [
    pytest.param([padded(MAX_HEAD_BYTES)], id="exactly-the-cap-in-one-read"),
    pytest.param(split(padded(MAX_HEAD_BYTES), 30_000, 60_000), id="the-cap-in-three-reads"),
    pytest.param([b"GET /healthz?q=" + b"u" * 60_000 + b" HTTP/1.1\r\n\r\n"], id="60000-byte-url"),
]


@pytest.mark.parametrize("reads", FITS)
def test_a_head_within_the_cap_is_answered(reads: list[bytes]) -> None:
    assert statuses(reads) == ([200], False)


def test_a_body_is_no_part_of_the_head() -> None:
    body = b'{"q": "' + b"a" * 200_000 + b'"}'
    post = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    assert statuses([post]) == ([200], False)  # head and a 200 KB body in one read


def test_each_request_on_a_connection_gets_the_whole_cap() -> None:
    full = padded(MAX_HEAD_BYTES)
    assert statuses([full, full, padded(MAX_HEAD_BYTES + 1)]) == ([200, 200, 431], True)


def test_a_pipelined_head_is_counted_from_where_it_begins() -> None:
    """A head that begins inside a read (behind another request) is counted as parsed."""
    assert statuses([request() + padded(60_000)]) == ([200, 200], False)
    over = request() + request(b"X-P: " + b"a" * 70_000 + b"\r\n")
    assert statuses([over]) == ([431], True)  # refused while the first is still running


@pytest.mark.parametrize(
    "head",
    [b"GARBAGE\r\n\r\n", b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n"],
    ids=["request-line", "content-length"],
)
def test_a_head_the_parser_refuses_is_400_with_nosniff(head: bytes) -> None:
    # uvicorn's own 400 carried no nosniff, which every other answer does.
    async def run() -> FakeTransport:
        protocol = BoundedHeadProtocol(uvicorn.Config(_ok, log_level="critical"), ServerState(), {})
        transport = FakeTransport()
        transport.protocol = protocol
        protocol.connection_made(transport)
        protocol.data_received(head)
        await asyncio.sleep(0.01)
        return transport

    transport = asyncio.run(run())
    answer_head = transport.written.split(b"\r\n\r\n")[0].lower()
    assert answer_head.startswith(b"http/1.1 400 ") and transport.closed
    assert b"x-content-type-options: nosniff" in answer_head.split(b"\r\n")


async def _slow(scope: Any, receive: Any, send: Any) -> None:
    """Reads the whole body, then works 0.3 s before answering."""
    while (await receive()).get("more_body"):
        pass
    await asyncio.sleep(0.3)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _timed(
    reads: Sequence[tuple[float, bytes]], app: Any = _ok, linger: float = 0.5
) -> FakeTransport:
    """Each read after its pause (seconds), then ``linger`` seconds for timers to fire."""

    async def run() -> FakeTransport:
        protocol = BoundedHeadProtocol(uvicorn.Config(app, log_level="critical"), ServerState(), {})
        transport = FakeTransport()
        transport.protocol = protocol
        protocol.connection_made(transport)
        for pause, data in reads:
            await asyncio.sleep(pause)
            if transport.closed:
                break
            protocol.data_received(data)
        await asyncio.sleep(linger)
        if not transport.closed:
            protocol.connection_lost(None)  # the test ends it: no timer outlives the loop
        return transport

    return asyncio.run(run())


@pytest.mark.parametrize(
    "reads",
    [
        pytest.param([], id="nothing-sent"),
        pytest.param([(0.0, b"GET /healthz HTTP/1.1\r\nHo")], id="half-a-head"),
        pytest.param(
            [(0.0, b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")],
            id="half-a-body",
        ),
    ],
)
def test_a_client_that_stops_sending_is_answered_408_and_closed(
    reads: list[tuple[float, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Such connections were held for good: a thousand of them took every descriptor.
    monkeypatch.setattr("engine.surfaces.http.protocol.CLIENT_WAIT_S", 0.1)
    transport = _timed(reads)
    assert transport.closed
    assert transport.written.startswith(b"HTTP/1.1 408 ")
    assert b"x-content-type-options: nosniff" in transport.written


def test_slow_senders_and_slow_answers_are_not_timed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("engine.surfaces.http.protocol.CLIENT_WAIT_S", 0.2)
    head = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\n"
    trickle = [(0.0, head), (0.1, b"ab"), (0.1, b"cd"), (0.1, b"ef")]  # a byte each 0.1 s
    assert b"HTTP/1.1 200 " in _timed(trickle).written
    # The application works 0.3 s (past the wait) on a whole request: answered, not 408.
    answered = _timed([(0.0, request())], app=_slow, linger=0.6).written
    assert answered.startswith(b"HTTP/1.1 200 ") and b" 408 " not in answered


async def _asks_late(scope: Any, receive: Any, send: Any) -> None:
    """Works 0.3 s before it reads the body (an upload waiting for the write lock)."""
    await asyncio.sleep(0.3)
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_a_client_waiting_for_100_continue_is_not_timed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # It sends its body only once the application asks for it (uvicorn's 100 Continue).
    monkeypatch.setattr("engine.surfaces.http.protocol.CLIENT_WAIT_S", 0.1)

    async def run() -> FakeTransport:
        protocol = BoundedHeadProtocol(
            uvicorn.Config(_asks_late, log_level="critical"), ServerState(), {}
        )
        transport = FakeTransport()
        transport.protocol = protocol
        protocol.connection_made(transport)
        protocol.data_received(
            b"POST /x HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n"
        )
        for _ in range(100):  # until the 100 Continue (the application asked for the body)
            await asyncio.sleep(0.01)
            if b"100 Continue" in transport.written:
                break
        protocol.data_received(b"ok")
        await asyncio.sleep(0.3)
        protocol.connection_lost(None)
        return transport

    written = asyncio.run(run()).written
    assert b" 408 " not in written and b"HTTP/1.1 200 " in written


def test_a_request_queued_behind_a_slow_one_is_not_timed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The timer looked at the newest request only (queued, its reading paused), not at
    # the one the application was answering: 408 before the first answer.
    monkeypatch.setattr("engine.surfaces.http.protocol.CLIENT_WAIT_S", 0.1)
    second = b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n"
    reads = [(0.0, request() + second), (0.15, b"ok")]  # its body after the wait
    written = _timed(reads, app=_slow, linger=1.0).written
    assert written.count(b"HTTP/1.1 200 ") == 2 and b" 408 " not in written


def test_half_a_head_after_an_answered_request_gets_408(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("engine.surfaces.http.protocol.CLIENT_WAIT_S", 0.1)
    transport = _timed([(0.0, request()), (0.05, b"GET /healthz HTTP/1.1\r\nHo")])
    assert transport.closed and transport.written.startswith(b"HTTP/1.1 200 ")
    assert b"HTTP/1.1 408 " in transport.written
