"""``Lifetime``: the calls in flight on one corpus, and its release after the last one.

A corpus's SQLite connections, tantivy reader and vector index are shared by every thread
that calls it. Closing them while another thread is inside a call freed memory SQLite was
still using (a drop during reads crashed the process). So every public call enters the
corpus's lifetime, and ``close`` first refuses new calls, then waits for the ones in
flight; if they outlast the wait, the last of them to leave releases the resources —
never a thread other than the last user.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Concatenate, ParamSpec, Protocol, TypeVar

__all__ = ["Lifetime", "in_lifetime"]

logger = logging.getLogger(__name__)


class Lifetime:
    """Counts calls in flight; ``end`` runs ``release`` once none is left.

    Args:
        closed_error: builds the exception a call entering after ``end`` raises.
    """

    def __init__(self, closed_error: Callable[[], Exception]) -> None:
        self._closed_error = closed_error
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._ended = False
        self._pending: Callable[[], None] | None = None
        self._inside = threading.local()

    @property
    def ended(self) -> bool:
        return self._ended

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """One public call: refused once the lifetime ended (re-entrant in a thread)."""
        depth = getattr(self._inside, "depth", 0)
        with self._cond:
            if self._ended and depth == 0:
                raise self._closed_error()
            self._active += 1
        self._inside.depth = depth + 1
        try:
            yield
        finally:
            self._inside.depth = depth
            release = None
            with self._cond:
                self._active -= 1
                if self._active == 0:
                    self._cond.notify_all()
                    release, self._pending = self._pending, None
            if release is not None:
                _run(release)

    def end(self, release: Callable[[], None], wait_s: float) -> None:
        """Refuse new calls, wait up to ``wait_s`` for those in flight (never for the
        calling thread's own), then ``release`` — here, or in the last call to leave."""
        own = getattr(self._inside, "depth", 0)
        with self._cond:
            if self._ended:
                return
            self._ended = True
            if not self._cond.wait_for(lambda: self._active <= own, timeout=wait_s):
                logger.warning(
                    "closing a corpus with %d calls still running: it is released after them",
                    self._active - own,
                )
                self._pending = release
                return
            if own:  # closed from inside one of its own calls: released when it returns
                self._pending = release
                return
        release()


def _run(release: Callable[[], None]) -> None:
    try:
        release()
    except Exception as exc:  # the caller's call already returned: log, do not raise into it
        logger.warning("releasing a closed corpus failed (%s)", type(exc).__name__)


class _Living(Protocol):
    _lifetime: Lifetime


_S = TypeVar("_S", bound=_Living)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def in_lifetime(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """A public method: one call counted in its object's ``_lifetime``, refused once the
    lifetime ended."""

    def call(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lifetime.call():
            return method(self, *args, **kwargs)

    functools.update_wrapper(call, method)
    return call
