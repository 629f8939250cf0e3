"""``SearchGate``: the Python part of searches runs one at a time, first come first served.

Why serialise searches: a search is mostly Python between short calls into tantivy, SQLite
and FAISS, each of which drops and retakes the GIL. Eight threads doing that at once
thrash on the interpreter lock — measured on two cores, 8 keyword readers finished fewer
searches than 1 (11.6k vs 27k in 8 s) with a p95 of 14.7 ms against 0.39 ms. Run one at a
time, each search keeps the interpreter for its ~0.3 ms and the others wait in line.

Why FIFO: a plain ``threading.Lock`` wakes an arbitrary waiter, so some searches starve
(the same prototype kept a 14 ms p95). Here each waiter parks on its own event and the
releaser hands the gate to the oldest one. Model calls (which release the GIL for
milliseconds) and database scans stay outside the gate.

Ownership: each ``SearchEngine`` owns one gate (``SearchEngine(serialize_searches=...)``)
and passes it to its corpora; nothing is process-wide. A waiter interrupted while it
waits (KeyboardInterrupt, an exception raised by a signal handler) leaves the queue — and
passes the gate on if it had just been handed it — so an interruption never strands the
gate.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Iterator
from types import TracebackType


class SearchGate:
    """A fair (first-come, first-served) mutex for the CPU-bound part of a search.

    Re-entrant: a thread that holds the gate may enter it again (a keyword search holds it
    for its whole length, and the index backend inside enters it too). ``suspended()``
    lets the holder step out for work that must not keep others waiting (a database scan)
    and queue again afterwards.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None  # the holding thread; None: the gate is free
        self._depth = 0
        self._waiting: collections.deque[tuple[int, threading.Event]] = collections.deque()

    def __enter__(self) -> None:
        me = threading.get_ident()
        with self._lock:
            if self._owner == me:
                self._depth += 1
                return
            if self._owner is None:
                self._owner, self._depth = me, 1
                return
            turn = threading.Event()
            self._waiting.append((me, turn))
        try:
            turn.wait()  # the releaser makes us the owner, then sets the event
        except BaseException:
            with self._lock:
                handed_over = turn.is_set()  # then the gate is ours: pass it on below
                if not handed_over:
                    self._waiting.remove((me, turn))
            if handed_over:
                self._release()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            if self._owner != threading.get_ident():
                return  # lost in ``suspended()``: interrupted while queueing to come back
            self._depth -= 1
            if self._depth > 0:
                return
        self._release()

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Step out of the gate for the block if this thread holds it (others go first),
        then wait for it again, at the same depth."""
        with self._lock:
            held = self._depth if self._owner == threading.get_ident() else 0
        if not held:
            yield
            return
        self._release()
        try:
            yield
        finally:
            self.__enter__()
            with self._lock:
                self._depth = held

    def _release(self) -> None:
        with self._lock:
            if self._waiting:
                owner, turn = self._waiting.popleft()
                self._owner, self._depth = owner, 1
                turn.set()
            else:
                self._owner, self._depth = None, 0


def suspended(
    gate: contextlib.AbstractContextManager[None],
) -> contextlib.AbstractContextManager[None]:
    """``gate.suspended()`` for a ``SearchGate``; any other gate (an open one) needs none."""
    return gate.suspended() if isinstance(gate, SearchGate) else contextlib.nullcontext()


def open_gate() -> contextlib.AbstractContextManager[None]:
    """The gate of an engine that does not serialise searches: entering it never waits."""
    return contextlib.nullcontext()
