"""A clock the test moves by hand (for rate limiters, breakers and health-check caches)."""

from __future__ import annotations


class FakeClock:
    """Callable like ``time.monotonic``; ``advance`` moves it forward."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
