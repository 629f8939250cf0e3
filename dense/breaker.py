"""A circuit breaker for remote embedding providers.

A dead provider must never cost every query a timeout. After a failure the breaker is
*open*: ``allow()`` answers False at once, without any I/O, until a back-off window has
passed. The window grows exponentially with each consecutive failure and is capped:
``min(base_backoff_s * 2 ** (failures - 1), max_backoff_s)``. When the window has passed,
exactly one caller is let through to probe (*half-open*); everyone else still gets False.
The probe's outcome decides: success closes the breaker and resets the back-off, failure
re-opens it with the next, longer window. Should the probe never report back (its caller
crashed), another probe is granted one window later, so the breaker cannot wedge.

A cheap check (a health check) may be the probe. It cannot close the breaker: a server
can answer its health check and still fail every real call, and a passing check that
reset the back-off would let every window's first query pay the real call's timeout,
the window never growing. A passing check calls ``admit_trial()`` instead: the breaker
stays half-open, its back-off untouched, and the next ``allow()`` lets exactly one real
call through as the trial, whose ``record_success()`` or ``record_failure()`` decides.
Only a real call's success closes the breaker.

Failures reported while the breaker is already open come from calls admitted before it
opened (several in-flight requests failing together); they do not lengthen the window.

The breaker is pure (no network, no sleeping) and thread-safe; the clock is injectable so
tests are deterministic.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["BreakerState", "CircuitBreaker"]

logger = logging.getLogger(__name__)


class BreakerState(enum.Enum):
    """Where the breaker stands."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


class CircuitBreaker:
    """Thread-safe closed / open / half-open breaker with capped exponential back-off.

    Usage: ask ``allow()`` before a remote call; if it answers True, make the call and
    report ``record_success()`` or ``record_failure()``. If it answers False, fail fast.
    """

    def __init__(
        self,
        base_backoff_s: float = 1.0,
        max_backoff_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not base_backoff_s > 0:
            raise ValueError(f"base_backoff_s must be > 0, got {base_backoff_s!r}")
        if not max_backoff_s >= base_backoff_s:
            raise ValueError(
                f"max_backoff_s must be >= base_backoff_s, got {max_backoff_s!r} < "
                f"{base_backoff_s!r}"
            )
        self._base = float(base_backoff_s)
        self._max = float(max_backoff_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._window_start = 0.0  # when the breaker opened, or the probe (trial) was granted
        self._trial = False  # half-open: a cheap check passed, one real call may go

    @property
    def clock(self) -> Callable[[], float]:
        """The clock this breaker reads (shared with callers that cache by time)."""
        return self._clock

    @property
    def state(self) -> BreakerState:
        """The state as of now (an elapsed open window still reads OPEN until ``allow``)."""
        with self._lock:
            return self._state

    @property
    def consecutive_failures(self) -> int:
        """Failures since the last success; 0 when closed."""
        with self._lock:
            return self._failures

    @property
    def trial_pending(self) -> bool:
        """Whether a passed check has admitted a real call that ``allow()`` has not yet
        let through (``admit_trial``)."""
        with self._lock:
            return self._trial

    def backoff_s(self, failures: int) -> float:
        """The open window after ``failures`` consecutive failures (0 for none)."""
        if failures <= 0:
            return 0.0
        # Cap the exponent first so huge failure counts cannot overflow a float.
        exponent = min(failures - 1, 1 + int(self._max / self._base).bit_length())
        return min(self._base * 2.0**exponent, self._max)

    def retry_after_s(self) -> float:
        """Seconds until the next probe may be granted (0 when a call would be allowed)."""
        with self._lock:
            if self._state is BreakerState.CLOSED or self._trial:
                return 0.0
            remaining = self._window_start + self.backoff_s(self._failures) - self._clock()
            return max(0.0, remaining)

    def allow(self) -> bool:
        """May the caller touch the network now? Never blocks on I/O.

        Closed: always True. Open: False until the window passes, then True for exactly
        one caller, which becomes the half-open probe. Half-open: False for everyone else
        until the probe reports (or one more window passes without a report) — except
        that after ``admit_trial()`` exactly one caller is let through as the trial, with
        a fresh window to report in.
        """
        with self._lock:
            if self._state is BreakerState.CLOSED:
                return True
            now = self._clock()
            if self._trial:
                self._trial = False
                self._window_start = now
                logger.debug("circuit half-open: trial call after %d failures", self._failures)
                return True
            if now < self._window_start + self.backoff_s(self._failures):
                return False
            # Window over: grant one probe and start a new window for it.
            self._state = BreakerState.HALF_OPEN
            self._window_start = now
            logger.debug("circuit half-open after %d failures; probing", self._failures)
            return True

    def admit_trial(self) -> None:
        """A cheap check (not the real call) passed: let one real call through as the trial.

        Only while half-open; it neither closes the breaker nor resets the back-off, so a
        server that passes its health check but fails every real call still backs off
        exponentially. Closed or open: nothing happens (a check that raced a failure
        cannot re-admit calls the failure has just shut out).
        """
        with self._lock:
            if self._state is BreakerState.HALF_OPEN:
                self._trial = True

    def record_success(self) -> None:
        """A real call succeeded: close the breaker and reset the back-off."""
        with self._lock:
            if self._state is not BreakerState.CLOSED:
                logger.info("circuit closed after %d failures", self._failures)
            self._state = BreakerState.CLOSED
            self._failures = 0
            self._trial = False

    def record_failure(self) -> None:
        """A call failed: open the breaker (or re-open it with a longer window)."""
        with self._lock:
            if self._state is BreakerState.OPEN:
                return  # a straggler admitted before the breaker opened
            self._failures += 1
            self._state = BreakerState.OPEN
            self._trial = False
            self._window_start = self._clock()
            logger.warning(
                "circuit open after %d consecutive failures; next probe in %.2f s",
                self._failures,
                self.backoff_s(self._failures),
            )
