"""A server's shutdown waits for the uploads being written (``WritesInFlight``)."""

from __future__ import annotations

import asyncio
import threading

from engine.surfaces.bulk import BulkReport
from engine.surfaces.http.in_flight import WritesInFlight
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
