"""CircuitBreaker: state machine, back-off schedule and one-probe-per-window guarantee."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dense.breaker import BreakerState, CircuitBreaker
from tests.support.clock import FakeClock


def state_of(breaker: CircuitBreaker) -> BreakerState:
    return breaker.state  # read afresh; mypy would keep an earlier narrowing


def make(base: float = 1.0, cap: float = 60.0) -> tuple[CircuitBreaker, FakeClock]:
    clock = FakeClock()
    return CircuitBreaker(base_backoff_s=base, max_backoff_s=cap, clock=clock), clock


def test_closed_breaker_allows_everyone() -> None:
    breaker, _ = make()
    assert all(breaker.allow() for _ in range(10))
    assert breaker.state is BreakerState.CLOSED


def test_failure_opens_and_blocks_until_window_passes() -> None:
    breaker, clock = make(base=2.0)
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allow()
    clock.advance(1.999)
    assert not breaker.allow()
    assert breaker.retry_after_s() == pytest.approx(0.001)
    clock.advance(0.001)
    assert breaker.allow()  # the one probe
    assert state_of(breaker) is BreakerState.HALF_OPEN
    assert not breaker.allow()  # everyone else waits for the probe


def test_probe_success_closes_and_resets_backoff() -> None:
    breaker, clock = make(base=1.0)
    for _ in range(3):  # windows 1, 2, 4
        breaker.record_failure()
        clock.advance(breaker.backoff_s(breaker.consecutive_failures))
        assert breaker.allow()
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED
    assert breaker.consecutive_failures == 0
    breaker.record_failure()
    clock.advance(1.0)  # back to the base window, not 8 s
    assert breaker.allow()


def test_probe_failure_reopens_with_doubled_window() -> None:
    breaker, clock = make(base=1.0)
    breaker.record_failure()
    clock.advance(1.0)
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    clock.advance(1.5)
    assert not breaker.allow()
    clock.advance(0.5)
    assert breaker.allow()


def test_stragglers_do_not_lengthen_the_window() -> None:
    breaker, clock = make(base=1.0)
    for _ in range(5):  # five in-flight calls admitted while closed all fail
        breaker.record_failure()
    assert breaker.consecutive_failures == 1
    clock.advance(1.0)
    assert breaker.allow()


def test_lost_probe_is_replaced_after_one_window() -> None:
    breaker, clock = make(base=3.0)
    breaker.record_failure()
    clock.advance(3.0)
    assert breaker.allow()  # probe granted, never reports back
    clock.advance(2.9)
    assert not breaker.allow()
    clock.advance(0.1)
    assert breaker.allow()


def test_success_from_any_state_closes() -> None:
    breaker, _ = make()
    breaker.record_failure()
    breaker.record_success()
    assert breaker.allow()
    assert breaker.retry_after_s() == 0.0


@pytest.mark.parametrize(
    ("base", "cap"), [(0.0, 1.0), (-1.0, 1.0), (2.0, 1.0), (float("nan"), 1.0)]
)
def test_bad_arguments_are_rejected(base: float, cap: float) -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(base_backoff_s=base, max_backoff_s=cap)


def test_concurrent_callers_get_exactly_one_probe() -> None:
    breaker, clock = make()
    breaker.record_failure()
    clock.advance(1.0)
    barrier = threading.Barrier(16)
    granted: list[bool] = []
    lock = threading.Lock()

    def worker() -> None:
        barrier.wait()
        ok = breaker.allow()
        with lock:
            granted.append(ok)

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert granted.count(True) == 1
    assert len(granted) == 16


@given(
    base=st.floats(min_value=1e-3, max_value=10.0),
    factor=st.floats(min_value=1.0, max_value=1e4),
    failures=st.integers(min_value=0, max_value=10_000),
)
def test_backoff_is_monotone_and_capped(base: float, factor: float, failures: int) -> None:
    breaker = CircuitBreaker(base_backoff_s=base, max_backoff_s=base * factor)
    current = breaker.backoff_s(failures)
    assert 0.0 <= current <= base * factor
    assert breaker.backoff_s(failures + 1) >= current
    if failures >= 1:
        assert current >= min(base, base * factor)


@settings(max_examples=200)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["allow", "success", "failure"]),
            st.floats(min_value=0.0, max_value=5.0),
        ),
        max_size=60,
    )
)
def test_never_two_probes_in_one_window(steps: list[tuple[str, float]]) -> None:
    """Between a failure and the next success, grants are at least one window apart."""
    breaker, clock = make(base=0.5, cap=4.0)
    last_grant: float | None = None
    for action, dt in steps:
        clock.advance(dt)
        if action == "success":
            breaker.record_success()
            last_grant = None
        elif action == "failure":
            breaker.record_failure()
            last_grant = None
        else:
            state_before = breaker.state
            failures = breaker.consecutive_failures
            if breaker.allow() and state_before is not BreakerState.CLOSED:
                if last_grant is not None:
                    assert clock.now - last_grant >= breaker.backoff_s(failures)
                last_grant = clock.now
            assert breaker.backoff_s(breaker.consecutive_failures) <= 4.0
