"""The background repairer: heals degraded documents while nobody is writing.

A daemon thread that, every ``interval_s``, asks each open corpus to re-embed at most
``batch_size`` degraded documents (one embedder call, one store transaction, the corpus's
write lock held only for that batch). A corpus with nothing degraded costs one indexed
``SELECT``; a dead provider costs nothing beyond what its circuit breaker allows, because
``repair`` asks ``is_available()`` first. Logs carry corpus names and counts only.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from engine.errors import EngineBusy, EngineError, InvalidArgument

__all__ = ["BackgroundRepairer", "Repairable"]

logger = logging.getLogger(__name__)

LOCK_WAIT_S = 1.0
"""How long a pass waits for another write to a corpus before it leaves that corpus to the
next pass: never the engine's whole busy timeout, which ``stop`` (and so the engine's
``close``) would have to sit out."""


class Repairable(Protocol):
    """What the repairer needs of a corpus (``engine.Corpus`` satisfies it)."""

    @property
    def name(self) -> str: ...

    def repair(
        self,
        batch_size: int = 256,
        *,
        max_documents: int | None = None,
        lock_wait_s: float | None = None,
    ) -> int: ...


class BackgroundRepairer:
    """Periodic, bounded re-embedding of degraded documents on one daemon thread.

    Args:
        corpora: returns the corpora to look after, asked afresh on every pass (so
            corpora opened or dropped later are followed).
        interval_s: seconds between passes (the first pass runs at once).
        batch_size: the most documents re-embedded per corpus per pass.
    """

    def __init__(
        self,
        corpora: Callable[[], Sequence[Repairable]],
        *,
        interval_s: float = 30.0,
        batch_size: int = 64,
    ) -> None:
        if not 0.01 <= interval_s <= 86_400:
            raise InvalidArgument(f"interval_s must be in 0.01..86400, got {interval_s!r}")
        if isinstance(batch_size, bool) or not 1 <= batch_size <= 10_000:
            raise InvalidArgument(f"batch_size must be in 1..10000, got {batch_size!r}")
        self._corpora = corpora
        self._interval_s = float(interval_s)
        self._batch_size = batch_size
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._passes = 0
        self._healed = 0

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def passes(self) -> int:
        """Completed passes since ``start``."""
        with self._lock:
            return self._passes

    @property
    def healed(self) -> int:
        """Documents re-embedded by this repairer so far."""
        with self._lock:
            return self._healed

    def start(self) -> None:
        """Start the thread (no-op when it is running already)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="tandem-repairer", daemon=True)
            self._thread.start()
        logger.info(
            "background repairer started (every %.2f s, batches of %d)",
            self._interval_s,
            self._batch_size,
        )

    def stop(self, timeout_s: float = 30.0) -> None:
        """Ask the thread to stop and wait for it (a batch in flight finishes first)."""
        self._stop.set()
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout_s)
            if thread.is_alive():
                logger.warning("background repairer did not stop within %.1f s", timeout_s)

    def run_once(self) -> int:
        """One pass over every corpus; returns how many documents it healed."""
        healed = 0
        try:
            corpora = self._corpora()
        except Exception as exc:  # the thread is the only healer: it outlives this pass
            logger.error("listing the corpora to repair failed (%s)", type(exc).__name__)
            corpora = []
        for corpus in corpora:
            if self._stop.is_set():
                break
            try:
                n = corpus.repair(
                    self._batch_size, max_documents=self._batch_size, lock_wait_s=LOCK_WAIT_S
                )
            except EngineBusy:  # another write holds the corpus: the next pass tries again
                logger.debug("repair of corpus %s skipped: a write is under way", corpus.name)
                continue
            except (EngineError, sqlite3.Error) as exc:  # e.g. the corpus closed meanwhile
                logger.warning("repair of corpus %s failed (%s)", corpus.name, type(exc).__name__)
                continue
            except Exception as exc:  # a bug in a custom embedder, say
                # The thread is the only healer: it must outlive a failing pass, and the
                # message may carry document text, so only the type is logged.
                logger.error(
                    "repair of corpus %s failed (%s); the next pass tries again",
                    corpus.name,
                    type(exc).__name__,
                )
                continue
            if n:
                logger.info("repaired %d degraded documents in corpus %s", n, corpus.name)
            healed += n
        with self._lock:
            self._passes += 1
            self._healed += healed
        return healed

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self._interval_s)

    def __enter__(self) -> BackgroundRepairer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
