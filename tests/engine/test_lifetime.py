"""``Lifetime``: no resource is released while a call is in flight, and none is entered
after the end."""

from __future__ import annotations

import threading
import time

import pytest

from engine.lifetime import Lifetime

GENEROUS_S = 60.0


class Closed(Exception):
    pass


def _call_in_flight(
    lifetime: Lifetime, released: list[str]
) -> tuple[threading.Thread, threading.Event]:
    """A call running in another thread until the returned event is set; it records
    "call done" as it leaves (before any release it triggers, whatever the timing)."""
    inside, leave = threading.Event(), threading.Event()

    def caller() -> None:
        with lifetime.call():
            inside.set()
            leave.wait(GENEROUS_S)
            released.append("call done")

    thread = threading.Thread(target=caller)
    thread.start()
    assert inside.wait(GENEROUS_S)
    return thread, leave


def test_end_waits_for_calls_in_flight_and_refuses_new_ones() -> None:
    lifetime = Lifetime(Closed)
    released: list[str] = []
    thread, leave = _call_in_flight(lifetime, released)
    ender = threading.Thread(target=lifetime.end, args=(lambda: released.append("released"), 60))
    ender.start()
    deadline = time.monotonic() + GENEROUS_S
    while not lifetime.ended and time.monotonic() < deadline:  # refuses at once, before
        time.sleep(0.001)  # the call in flight is over
    with pytest.raises(Closed), lifetime.call():
        pass
    leave.set()
    thread.join(GENEROUS_S)
    ender.join(GENEROUS_S)
    assert released == ["call done", "released"]
    lifetime.end(lambda: released.append("twice"), 1)  # a second end does nothing
    assert released == ["call done", "released"]


def test_a_call_that_outlasts_the_wait_releases_when_it_leaves() -> None:
    lifetime = Lifetime(Closed)
    released: list[str] = []
    thread, leave = _call_in_flight(lifetime, released)
    lifetime.end(lambda: released.append("released"), 0.01)
    assert released == []  # not released under the running call
    leave.set()
    thread.join(GENEROUS_S)
    assert released == ["call done", "released"]


def test_end_from_inside_a_call_releases_when_that_call_returns() -> None:
    lifetime = Lifetime(Closed)
    released: list[str] = []
    with lifetime.call():
        with lifetime.call():  # re-entrant
            lifetime.end(lambda: released.append("released"), 60)  # does not wait for itself
            with lifetime.call():  # a nested call of the running one still works
                pass
        assert released == []
    assert released == ["released"]
    with pytest.raises(Closed), lifetime.call():
        pass
