"""Asking each open corpus's embedder whether it is up, for a metrics scrape.

A health check may wait on the network (Ollama's ``POST /api/show``, up to its health
timeout) or, for a custom embedder, on anything; a scrape must not. So every corpus's
check runs on a thread of its own — at most one at a time per corpus, a check still
running is not started again — and the scrape waits for them together, at most
``HEALTH_WAIT_S``; a check that finishes later sets its gauge then, for the next scrape.
The threads are daemons: an embedder that never answers cannot hold the process open.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

HEALTH_WAIT_S = 1.0
"""How long a scrape waits for the embedders' health checks, all together."""


class HealthChecks:
    """Runs named checks off the caller's thread, one at a time per name."""

    def __init__(self, wait_s: float = HEALTH_WAIT_S) -> None:
        self._wait_s = wait_s
        self._lock = threading.Lock()
        self._running: dict[str, threading.Thread] = {}

    def run(self, checks: Sequence[tuple[str, Callable[[], object]]]) -> None:
        """Start each check whose previous run has ended, then wait for all of them
        (those still running included) at most ``wait_s`` in all."""
        threads: list[threading.Thread] = []
        with self._lock:
            names = {name for name, _ in checks}
            for name in [n for n in self._running if n not in names]:
                del self._running[name]  # a corpus closed or dropped since
            for name, check in checks:
                thread = self._running.get(name)
                if thread is None or not thread.is_alive():
                    thread = threading.Thread(
                        target=check, name=f"tandem-health-{name}", daemon=True
                    )
                    thread.start()
                    self._running[name] = thread
                threads.append(thread)
        deadline = time.monotonic() + self._wait_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Wait for the checks still running, at most ``wait_s`` in all (a check that
        outlives it only asks; the corpus it reports on is closed and sets nothing)."""
        with self._lock:
            threads = list(self._running.values())
            self._running.clear()
        deadline = time.monotonic() + self._wait_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
