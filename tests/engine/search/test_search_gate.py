"""``SearchGate``: one holder at a time, waiters served in arrival order, released on
errors."""

from __future__ import annotations

import threading
import time

import pytest

from engine.search.gate import SearchGate


def _wait_until(condition: object, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.001)


def test_waiters_enter_in_arrival_order() -> None:
    gate = SearchGate()
    order: list[int] = []
    gate.__enter__()  # held by the test

    def worker(n: int) -> None:
        with gate:
            order.append(n)

    threads = []
    for n in range(6):
        thread = threading.Thread(target=worker, args=(n,))
        thread.start()
        threads.append(thread)
        _wait_until(lambda n=n: len(gate._waiting) == n + 1)  # queued before the next
    gate.__exit__(None, None, None)
    for thread in threads:
        thread.join(timeout=30)
    assert order == list(range(6))


def test_one_holder_at_a_time_under_contention() -> None:
    gate = SearchGate()
    inside = 0
    most = 0
    done = 0
    guard = threading.Lock()

    def worker() -> None:
        nonlocal inside, most, done
        for _ in range(300):
            with gate:
                with guard:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0)  # let another thread try its luck
                with guard:
                    inside -= 1
        with guard:
            done += 1

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert done == 8 and most == 1


def test_an_error_inside_releases_the_gate() -> None:
    gate = SearchGate()
    with pytest.raises(RuntimeError), gate:
        raise RuntimeError("search failed")
    entered = threading.Event()

    def worker() -> None:
        with gate:
            entered.set()

    thread = threading.Thread(target=worker)
    thread.start()
    assert entered.wait(timeout=30)
    thread.join(timeout=30)
