"""The background thread a ``FaissIndex`` builds its graphs on.

A daemon thread per index, started by a request and ended when no work is left (so an
index nobody references is collected once its build is over). ``job(proceed)`` does one
unit of work (plan, build, install) and returns whether it should run again at once;
it calls ``proceed()`` between pieces of work, which returns ``False`` once the builder
is closing — and, when a *gate* is given, first waits for the gate to open. The gate is
how tests (and operators) hold a build at a known point: nothing else ever blocks on it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

Proceed = Callable[[], bool]
_GATE_POLL_S = 0.05  # how often a gated builder looks for a close


class BackgroundBuilder:
    def __init__(
        self, job: Callable[[Proceed], bool], name: str, gate: threading.Event | None = None
    ) -> None:
        self._job = job
        self._name = name
        self._gate = gate
        self._cond = threading.Condition()
        self._requested = False
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def request(self) -> None:
        """Ask for the job to run (again); starts the thread on first use."""
        with self._cond:
            if self._closed:
                return
            self._requested = True
            self._cond.notify_all()
            if self._thread is None:
                self._busy = True  # from now until the thread finds nothing left to do
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def proceed(self) -> bool:
        """``False`` once closing; with a gate, waits for it to open (or for a close)."""
        if self._gate is not None:
            while not self._gate.wait(_GATE_POLL_S):
                if self._closed:
                    return False
        return not self._closed

    def sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds`` (a close or a new request ends it early); ``False`` if
        closed."""
        with self._cond:
            if not self._closed:
                self._cond.wait(max(0.0, seconds))
            return not self._closed

    def wait_quiet(
        self, last_write: Callable[[], float], delay: Callable[[], float], max_delays: int
    ) -> bool:
        """Wait until ``delay()`` seconds have passed since ``last_write()`` (a monotonic
        time), or ``max_delays`` delays since the wait began, so a bulk load builds
        once at its end; both are read again whenever the wait wakes (a write, a
        request, a changed delay: ``wake``). ``False`` if closed meanwhile."""
        began = time.monotonic()
        while True:
            now = time.monotonic()
            seconds = delay()
            quiet_at = last_write() + seconds
            give_up = began + max_delays * seconds
            if now >= quiet_at or now >= give_up:
                return not self._closed
            if not self.sleep(min(quiet_at, give_up) - now):
                return False

    def wake(self) -> None:
        """End a ``sleep`` early (it returns, and its caller looks again)."""
        with self._cond:
            self._cond.notify_all()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no run is requested or running; ``False`` on timeout."""
        with self._cond:
            return self._cond.wait_for(
                lambda: self._closed or not (self._requested or self._busy), timeout
            )

    def close(self, timeout: float | None = None) -> None:
        """Stop: an unfinished job abandons at its next ``proceed()``; joins the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        # The job is a bound method of the index that owns this builder: forgetting it
        # breaks that cycle, so a closed index (and the file it maps) is freed as soon
        # as nothing else holds it, not whenever the garbage collector runs.
        self._job = _no_job

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed or not self._requested:
                    self._busy = False
                    self._thread = None
                    self._cond.notify_all()
                    return
                self._requested = False
                self._busy = True
            again = False
            try:
                again = self._job(self.proceed)
            except Exception:  # a failed build must not kill the thread: log, serve exact
                logger.exception("background index build failed")
            finally:
                with self._cond:
                    self._busy = False
                    if again and not self._closed:
                        self._requested = True
                    self._cond.notify_all()


def _no_job(proceed: Proceed) -> bool:
    return False
