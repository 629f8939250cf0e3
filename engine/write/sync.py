"""One corpus, many processes: taking the write lock, and following other processes' writes.

``CorpusSync`` is the corpus's side of the SQLite-like model (see ``engine.write.lock``):

- ``writing()`` takes the corpus's write lock (``<corpus>/write.lock``) within the busy
  timeout — ``EngineBusy`` past it, ``EngineReadOnly`` on a read-only engine — and, as the
  new holder, first brings this process's indexes up to the store and repairs a keyword
  index left behind by a writer that died or failed. Until the write ends, this process is
  the only writer anywhere (``exclusive``).
- ``follow()`` runs before every search: one ``PRAGMA data_version`` when nothing changed.
  When another connection committed, it reads the store's counters and, if they moved,
  forgets cached visibility, re-reads a changed ``config.json`` (another process switched
  the embedder) and lets the derived indexes follow (``DerivedIndexes.follow``). While a
  local write runs, readers skip this: the writer updates the indexes itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from engine.errors import CorpusNotFound, EngineBusy, EngineReadOnly
from engine.storage import DocumentStore
from engine.write.indexes import DerivedIndexes
from engine.write.lock import LOCK_FILE, WriteLock

logger = logging.getLogger(__name__)

Stamp = tuple[int, int] | None
CONFIG_RETRY_S = 5.0  # a config whose embedder failed to build is tried again this late


def file_stamp(path: Path) -> Stamp:
    """(inode, mtime in ns) of ``path``, None when it is missing: changes on every save."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns)


class CorpusSync:
    """The write lock and change-following of one open corpus (see the module docstring).

    ``on_config_change`` is called when
    ``config.json`` changed on disk since it was last adopted (it may raise: see
    ``_adopt_changed_config``); ``name`` is for messages only.
    """

    def __init__(
        self,
        directory: Path,
        store: DocumentStore,
        indexes: DerivedIndexes,
        *,
        name: str,
        read_only: bool,
        busy_timeout: float,
        on_config_change: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._dir = directory
        self._store = store
        self._indexes = indexes
        self._name = name
        self._busy_timeout = busy_timeout
        self._on_config_change = on_config_change
        self._lock = None if read_only else WriteLock(directory / LOCK_FILE)
        self._local_lock = threading.RLock()  # read-only engines: orders close and writes
        self._follow_lock = threading.Lock()
        self._exclusive = False
        self.dropped = False
        self.config_stamp = file_stamp(directory / "config.json")
        self._config_retry_at: float | None = None  # a failed adoption: when to retry
        self._clock = clock

    @property
    def read_only(self) -> bool:
        return self._lock is None

    @property
    def exclusive(self) -> bool:
        """True while a write of this process holds the write lock: the only writer
        anywhere, updating the indexes itself. Read through the lock, so a child forked
        while another thread wrote (that thread stays behind) is not left believing it."""
        return self._exclusive and self._lock is not None and self._lock.held

    def open_indexes(self) -> None:
        """Open the derived indexes: as the holder (repairing) if the write lock is free
        right now, else following whatever the holder keeps on disk."""
        if self._lock is not None and self._lock.acquire(0):
            try:
                self._indexes.open(holder=True)
                self._store.announce_change()
            finally:
                self._lock.release()
        else:
            self._indexes.open(holder=False)

    # -- reads ----------------------------------------------------------------------------

    def follow(self) -> None:
        """Bring this process's view up to every committed write (cheap when none)."""
        if self._store.changed():
            try:
                self._catch_up(holder=False)
            except BaseException:
                self._store.look_again()
                raise
        if self._config_retry_at is not None and self._clock() >= self._config_retry_at:
            with self._follow_lock:  # the timer, not every commit, paces the retries
                self._adopt_changed_config(holder=False)
        self._indexes.replace_damaged_vectors()
        if self._indexes.keyword_pending and not self.exclusive:
            self._indexes.poll_keyword()

    def _catch_up(self, *, holder: bool, adopt_config: bool = True) -> None:
        state = self._store.state()
        if state.dropped:
            self.dropped = True
            raise CorpusNotFound(f"corpus {self._name!r} was dropped")
        if self.exclusive and not holder:
            return  # a write of this process is under way and updates the indexes itself
        if self._indexes.follows(state):
            # A writer checks the config even so: a switch elsewhere commits its new
            # epoch before it saves the config, and a search that followed the epoch in
            # between left this process with the old model to heal and add with.
            if holder and adopt_config:
                self._adopt_changed_config(holder=True)
            return
        with self._follow_lock:
            self._store.invalidate_caches()
            if adopt_config and (holder or self._config_retry_at is None):
                self._adopt_changed_config(holder=holder)
            self._indexes.follow(state)

    def _adopt_changed_config(self, *, holder: bool) -> None:
        """Adopt a ``config.json`` another process changed. The stamp moves only once the
        new config was adopted: if building its embedder fails (a model that cannot load
        here right now), a search goes on — ``on_config_change`` left it answering from
        keywords — and tries again ``CONFIG_RETRY_S`` later, while a write raises rather
        than embed with the old model into a corpus switched to another."""
        stamp = file_stamp(self._dir / "config.json")
        if stamp == self.config_stamp:
            self._config_retry_at = None
            return
        try:
            self._on_config_change()
        except Exception as exc:
            self._config_retry_at = self._clock() + CONFIG_RETRY_S
            if holder:
                raise
            logger.warning(
                "corpus %s: could not adopt the config another process wrote (%s); "
                "answering from keywords, retrying in %g s",
                self._name,
                type(exc).__name__,
                CONFIG_RETRY_S,
            )
            return
        self.config_stamp = stamp
        self._config_retry_at = None

    # -- writes ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self, timeout: float | None = None) -> Iterator[None]:
        """Hold the corpus's write lock for one write (re-entrant in one thread); wait at
        most ``timeout`` seconds (default: the engine's busy timeout)."""
        lock = self._lock
        if lock is None:
            raise EngineReadOnly(f"corpus {self._name!r} is open read-only")
        if self.dropped:
            raise CorpusNotFound(f"corpus {self._name!r} was dropped")
        wait = self._busy_timeout if timeout is None else timeout
        deadline = time.monotonic() + wait
        if not lock.owned:
            lock.wait_while_yielding(wait, self._is_dropped)  # this process's drop first
            if self.dropped:
                raise CorpusNotFound(f"corpus {self._name!r} was dropped")
        if not lock.acquire(max(0.0, deadline - time.monotonic()), give_up=self._is_dropped):
            if self.dropped:
                raise CorpusNotFound(f"corpus {self._name!r} was dropped")
            raise EngineBusy(
                f"corpus {self._name!r}: another write held the lock for {wait:g} s (busy_timeout)"
            )
        if self.dropped:  # dropped while this write waited, by this process or another
            lock.release()
            raise CorpusNotFound(f"corpus {self._name!r} was dropped")
        # The lock counts its own acquires, and a forked child's lock starts from 0 when
        # its holder stayed behind: that child's first write is the outermost, takes over
        # and releases the lock (a count kept here went on from the parent's).
        outermost = lock.depth == 1
        try:
            if outermost:
                self._take_over()
            yield
        finally:
            if outermost:
                try:
                    self._settle()
                finally:
                    self._exclusive = False
                    lock.release()
            else:
                lock.release()

    def _is_dropped(self) -> bool:
        return self.dropped

    @contextlib.contextmanager
    def drop_waiting(self) -> Iterator[None]:
        """Around this process's wait for the lock to drop the corpus: its new writes
        wait behind the drop (``WriteLock.yielding``) instead of starving it."""
        if self._lock is None:
            yield
            return
        with self._lock.yielding():
            yield

    def end_for_drop(self) -> None:
        """The drop holds the lock and goes ahead: writes waiting for it, behind it or
        for the lock, give up at once with ``CorpusNotFound`` (the drop waits for the
        calls in flight, and they would have waited for the drop's lock)."""
        self.dropped = True
        if self._lock is not None:
            self._lock.wake()

    def _take_over(self) -> None:
        """As the new holder: follow everything committed so far, then repair."""
        self._catch_up(holder=True)
        self._exclusive = True
        self._store.announce_change()
        self._indexes.repair_keyword(self._store.seq)

    def _settle(self) -> None:
        """After a write (also a failed one): leave the indexes matching the store."""
        with contextlib.suppress(CorpusNotFound):
            self._catch_up(holder=True)

    @contextlib.contextmanager
    def closing(self) -> Iterator[bool]:
        """For ``close``: waits for this process's writes, then yields whether it holds
        the write lock too (taken only if free right now: closing never waits for
        another process) and has followed every commit, so it may save what it holds."""
        lock = self._lock
        if lock is None:
            with self._local_lock:
                yield False
            return
        with lock.mutex:
            got = lock.acquire(0)
            try:
                if got:
                    try:  # a save needs no config: one another process wrote waits
                        self._catch_up(holder=True, adopt_config=False)
                    except CorpusNotFound:
                        got = False
                yield got
            finally:
                if lock.held:
                    lock.release()

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()


def mark_dropped(
    directory: Path, busy_timeout: float, *, first: Callable[[], None] = lambda: None
) -> None:
    """Before a corpus directory is deleted: wait for its write lock, run ``first`` (the
    caller's own teardown: only once nothing can fail for want of the lock), then record
    the drop in its store, so every process that has it open stops answering for it.
    ``EngineBusy`` when a write holds the lock past ``busy_timeout``: nothing was done."""
    lock = WriteLock(directory / LOCK_FILE)
    if not lock.acquire(busy_timeout):
        lock.close()
        raise EngineBusy(f"{directory.name}: a write held the lock for {busy_timeout:g} s")
    try:
        first()
        store = DocumentStore(directory / "store.sqlite3")
        try:
            store.mark_dropped()
        finally:
            store.close()
    finally:
        lock.release()
        lock.close()
