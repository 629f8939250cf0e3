"""A server's shutdown waits for the uploads being written (``WritesInFlight``)."""

from __future__ import annotations

import threading

from engine.surfaces.http.in_flight import WritesInFlight


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
