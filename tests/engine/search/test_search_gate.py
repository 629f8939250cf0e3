"""``SearchGate``: one holder at a time, waiters served in arrival order, released on
errors."""

from __future__ import annotations

import sys
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


class _Interrupted(Exception):
    """What a signal handler raises into a waiting thread (like a timeout decorator)."""


def _held_gate() -> tuple[SearchGate, threading.Event, threading.Thread]:
    """A gate held by a background thread until the returned event is set."""
    gate = SearchGate()
    entered = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with gate:
            entered.set()
            release.wait(timeout=60)

    thread = threading.Thread(target=holder)
    thread.start()
    assert entered.wait(timeout=30)
    return gate, release, thread


def _enters_within(gate: SearchGate, timeout_s: float = 30.0) -> bool:
    entered = threading.Event()

    def worker() -> None:
        with gate:
            entered.set()

    thread = threading.Thread(target=worker, daemon=True)  # a hung one must not block exit
    thread.start()
    return entered.wait(timeout=timeout_s)


def test_a_waiter_interrupted_by_a_signal_leaves_the_queue() -> None:
    """Regression: an interrupted waiter stayed queued, so once the holder released, the
    gate was handed to a dead entry and every later search in the process hung."""
    import signal

    gate, release, holder = _held_gate()

    def interrupt(signum: int, frame: object) -> None:
        raise _Interrupted

    # SIGUSR1 sent to this thread once it waits in the gate (SIGALRM and its timer are
    # pytest-timeout's: left alone).
    main = threading.get_ident()
    parked = threading.Event()

    def interrupt_once_parked() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            frame = sys._current_frames().get(main)
            if (  # queued, and blocked in the turn's Event.wait (threading's Condition.wait)
                len(gate._waiting) == 1
                and frame is not None
                and frame.f_code.co_name == "wait"
                and frame.f_code.co_filename == threading.__file__
            ):
                parked.set()
                break
            time.sleep(0.001)
        signal.pthread_kill(main, signal.SIGUSR1)  # also when never parked: no hang

    previous = signal.signal(signal.SIGUSR1, interrupt)
    interrupter = threading.Thread(target=interrupt_once_parked, daemon=True)
    try:
        interrupter.start()
        with pytest.raises(_Interrupted):
            gate.__enter__()  # waits (the holder has it) until the signal interrupts
        interrupter.join(timeout=30)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert parked.is_set(), "the waiter never blocked in the gate"
    assert len(gate._waiting) == 0
    release.set()
    holder.join(timeout=30)
    assert _enters_within(gate)


def test_a_waiter_interrupted_just_after_being_handed_the_gate_passes_it_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The race's other side: the turn was granted, then the wait raised. The gate is
    ours at that moment, so leaving must release it rather than strand it."""
    import engine.search.gate as gate_module

    class InterruptedAfterTurn(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            super().wait(timeout)
            raise _Interrupted

    gate, release, holder = _held_gate()
    import types

    fake_threading = types.SimpleNamespace(
        Event=InterruptedAfterTurn, Lock=threading.Lock, get_ident=threading.get_ident
    )
    monkeypatch.setattr(gate_module, "threading", fake_threading)
    failed: list[BaseException] = []

    def unlucky() -> None:
        try:
            with gate:
                pass
        except _Interrupted as exc:
            failed.append(exc)

    waiter = threading.Thread(target=unlucky)
    waiter.start()
    _wait_until(lambda: len(gate._waiting) == 1)
    monkeypatch.undo()
    release.set()
    holder.join(timeout=30)
    waiter.join(timeout=30)
    assert len(failed) == 1
    assert _enters_within(gate)


def test_the_holder_may_enter_again_and_leaves_only_at_the_outermost_exit() -> None:
    gate = SearchGate()
    with gate:
        with gate:  # a keyword search holds the gate; its index backend enters it too
            assert not _enters_within(gate, timeout_s=0.2)
        assert not _enters_within(gate, timeout_s=0.2)  # still held after the inner exit
    assert _enters_within(gate)


def test_suspended_lets_a_waiter_in_then_takes_the_gate_back() -> None:
    """The database fallback steps out of the gate: a waiting search runs meanwhile, and
    the holder continues afterwards at the same depth, holding it again."""
    gate = SearchGate()
    order: list[str] = []
    waiter_in = threading.Event()
    waiter_may_leave = threading.Event()

    def waiter() -> None:
        with gate:
            order.append("waiter")
            waiter_in.set()
            waiter_may_leave.wait(timeout=30)

    with gate:
        with gate:
            thread = threading.Thread(target=waiter)
            thread.start()
            _wait_until(lambda: len(gate._waiting) == 1)
            with gate.suspended():
                assert waiter_in.wait(timeout=30)  # the waiter got in while we scanned
                order.append("scan")
                waiter_may_leave.set()
            order.append("back")  # re-acquired only after the waiter left
        assert not _enters_within(gate, timeout_s=0.2)  # depth restored: still held
    thread.join(timeout=30)
    assert order == ["waiter", "scan", "back"]
    assert _enters_within(gate)


def test_suspended_outside_the_gate_is_a_no_op() -> None:
    gate = SearchGate()
    with gate.suspended():
        assert _enters_within(gate)
    with gate:
        pass
    assert _enters_within(gate)


def test_the_database_fallback_scans_outside_a_held_gate() -> None:
    """``GateFreeBackend`` (the LIKE fallback's wrapper): while a keyword search that holds
    the gate scans the database, another search can take the gate."""
    from engine.search.current_index import GateFreeBackend

    gate = SearchGate()
    others_entered: list[bool] = []

    class Scan:
        name, priority = "database-like", 0

        def is_available(self) -> bool:
            return True

        def search(self, query: object, access: object) -> list[object]:
            others_entered.append(_enters_within(gate))
            return []

    backend = GateFreeBackend(Scan(), gate)  # type: ignore[arg-type]
    with gate:
        assert backend.search(None, None) == []  # type: ignore[arg-type]
        assert not _enters_within(gate, timeout_s=0.2)  # held again after the scan
    assert others_entered == [True]
