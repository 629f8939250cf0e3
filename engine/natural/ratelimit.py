"""A per-user token bucket: ``burst`` questions at once, refilled at a steady rate.

Each user's bucket holds at most ``burst`` tokens and gains ``per_minute / 60`` tokens a
second; a question takes one token or raises ``RateLimited`` with the time until one is
back. The clock is injectable (``time.monotonic`` by default). At most ``max_users``
buckets are kept; the least recently used is forgotten first (it would be full by then
in any realistic setting, so forgetting it grants nothing a wait would not).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from engine.natural.errors import RateLimited

_EPSILON = 1e-9  # clock arithmetic in floats: a token back "exactly now" counts


class TokenBucketLimiter:
    def __init__(
        self,
        per_minute: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_users: int = 10_000,
    ) -> None:
        if not per_minute > 0:
            raise ValueError(f"per_minute must be > 0, got {per_minute!r}")
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise ValueError(f"burst must be an int >= 1, got {burst!r}")
        if max_users < 1:
            raise ValueError(f"max_users must be >= 1, got {max_users!r}")
        self._rate = float(per_minute) / 60.0  # tokens per second
        self._burst = float(burst)
        self._clock = clock
        self._max_users = max_users
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def acquire(self, user: str) -> None:
        """Take one token from ``user``'s bucket, or raise ``RateLimited``."""
        with self._lock:
            now = self._clock()
            tokens, last = self._buckets.get(user, (self._burst, now))
            tokens = min(self._burst, tokens + max(0.0, now - last) * self._rate)
            if tokens >= 1.0 - _EPSILON:
                self._store(user, max(0.0, tokens - 1.0), now)
                return
            self._store(user, tokens, now)
            raise RateLimited((1.0 - tokens) / self._rate)

    def _store(self, user: str, tokens: float, now: float) -> None:
        self._buckets[user] = (tokens, now)
        self._buckets.move_to_end(user)
        while len(self._buckets) > self._max_users:
            self._buckets.popitem(last=False)
