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


def test_a_passed_check_admits_one_trial_without_resetting_the_backoff() -> None:
    """A health check is not the real call: it may let one real call through, but only
    that call's outcome decides, and a failing one backs off further (it flapped at the
    base window for ever when a passing check closed the breaker)."""
    breaker, clock = make(base=1.0)
    breaker.record_failure()
    clock.advance(1.0)
    assert breaker.allow()  # the probe: a health check
    breaker.admit_trial()  # it passed
    assert state_of(breaker) is BreakerState.HALF_OPEN
    assert breaker.consecutive_failures == 1  # the back-off is untouched
    assert breaker.trial_pending and breaker.retry_after_s() == 0.0
    assert breaker.allow()  # the trial: one real call
    assert not breaker.trial_pending
    assert not breaker.allow()  # nobody else
    breaker.record_failure()  # the real call failed: the window doubles
    assert breaker.consecutive_failures == 2
    clock.advance(1.999)
    assert not breaker.allow()
    clock.advance(0.001)
    assert breaker.allow()
    breaker.admit_trial()
    assert breaker.allow()
    breaker.record_success()  # only a real call's success closes and resets
    assert breaker.state is BreakerState.CLOSED
    assert breaker.consecutive_failures == 0
    assert not breaker.trial_pending


def test_the_trial_gets_a_window_of_its_own() -> None:
    """A trial that never reports is replaced one window after it was let through."""
    breaker, clock = make(base=2.0)
    breaker.record_failure()
    clock.advance(2.0)
    assert breaker.allow()
    clock.advance(1.5)  # a slow health check
    breaker.admit_trial()
    assert breaker.allow()  # the trial, at 3.5 s into the probe's window
    clock.advance(1.9)
    assert not breaker.allow()
    clock.advance(0.1)
    assert breaker.allow()


def test_admit_trial_does_nothing_unless_half_open() -> None:
    breaker, clock = make(base=1.0)
    breaker.admit_trial()  # closed: nothing to admit
    assert not breaker.trial_pending
    breaker.record_failure()
    breaker.admit_trial()  # open: a check that raced the failure admits nobody
    assert not breaker.trial_pending
    assert not breaker.allow()
    clock.advance(1.0)
    assert breaker.allow()
    breaker.admit_trial()
    breaker.record_failure()  # a failure withdraws a trial not yet let through
    assert not breaker.trial_pending
    assert not breaker.allow()


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
            st.sampled_from(["allow", "success", "failure", "admit"]),
            st.floats(min_value=0.0, max_value=5.0),
        ),
        max_size=60,
    )
)
def test_never_two_probes_in_one_window(steps: list[tuple[str, float]]) -> None:
    """Between a failure and the next success, grants are at least one window apart,
    but for the one trial a passed check admits; only success resets the count."""
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
        elif action == "admit":
            failures = breaker.consecutive_failures
            breaker.admit_trial()
            assert breaker.consecutive_failures == failures
        else:
            state_before = breaker.state
            trial = breaker.trial_pending
            failures = breaker.consecutive_failures
            if breaker.allow() and state_before is not BreakerState.CLOSED:
                if last_grant is not None and not trial:
                    assert clock.now - last_grant >= breaker.backoff_s(failures)
                last_grant = clock.now
            assert breaker.consecutive_failures == failures
            assert breaker.backoff_s(breaker.consecutive_failures) <= 4.0
