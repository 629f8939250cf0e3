"""A server's shutdown: it waits for the uploads being written (``WritesInFlight``), and
answers what it cuts off in the error shape (``RequestGuard``)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from types import SimpleNamespace

import pytest
from starlette.types import Message, Receive, Scope, Send

from engine.surfaces.bulk import BulkReport
from engine.surfaces.http.in_flight import WritesInFlight
from engine.surfaces.http.ops import RequestGuard
from engine.surfaces.http.routes_write import _outliving_cancellation


def test_wait_idle_waits_for_every_write_and_times_out_otherwise() -> None:
    writes = WritesInFlight()
    assert writes.wait_idle(0)  # nothing in flight
    inside, leave = threading.Event(), threading.Event()
    finished: list[str] = []

    def upload() -> None:
        with writes.writing():
            inside.set()
            leave.wait(60)
            finished.append("written")

    thread = threading.Thread(target=upload)
    thread.start()
    assert inside.wait(60)
    assert not writes.wait_idle(0.05)  # an upload still being written
    leave.set()
    assert writes.wait_idle(60)
    assert finished == ["written"]  # idle only once the write ended
    thread.join(60)


def test_an_upload_cancelled_by_a_shutdown_still_answers_its_report() -> None:
    """Regression: uvicorn cancels a request still running past its shutdown grace
    period (``Task.cancel``); the write thread went on and stored every document, but the
    client got a bare text 500. The request now waits for the thread and answers."""
    started, release = threading.Event(), threading.Event()
    report = BulkReport(added=3)

    def write() -> BulkReport:
        started.set()
        assert release.wait(60)
        return report

    async def shutdown_cancels_the_request() -> BulkReport:
        request = asyncio.ensure_future(_outliving_cancellation(write))
        while not started.is_set():
            await asyncio.sleep(0.01)
        request.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        await asyncio.sleep(0.05)
        release.set()
        return await request

    assert asyncio.run(shutdown_cancels_the_request()) is report


def test_a_request_cancelled_by_a_shutdown_gets_the_error_shape(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Review: a request still reading its body (or a read still running) when uvicorn
    cancelled it past the grace period got uvicorn's bare text 500 and a traceback in the
    log — ``RequestGuard`` caught ``Exception`` only. It now answers a JSON 503."""
    reading = asyncio.Event()
    sent: list[Message] = []

    async def slow_upload(scope: Scope, receive: Receive, send: Send) -> None:
        reading.set()
        await asyncio.sleep(3600)  # waiting for a body that trickles in

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": True}

    async def send(message: Message) -> None:
        sent.append(message)

    async def shutdown_cancels_the_request() -> None:
        guard = RequestGuard(slow_upload)
        app = SimpleNamespace(state=SimpleNamespace())  # no request metrics
        scope = {"type": "http", "path": "/v1/corpora/c/documents", "method": "POST", "app": app}
        request = asyncio.ensure_future(guard(scope, receive, send))
        await reading.wait()
        request.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        await request  # ends: the guard answered (nothing outside it waits to be cancelled)

    with caplog.at_level(logging.WARNING):
        asyncio.run(shutdown_cancels_the_request())
    start, body = sent
    assert start["status"] == 503
    headers = dict(start["headers"])
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"cache-control"] == b"no-store"
    assert headers[b"x-content-type-options"] == b"nosniff"
    assert json.loads(body["body"])["error"]["code"] == "shutting_down"
    assert "cut off by the server's shutdown" in caplog.text
