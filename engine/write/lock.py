"""The write lock: one writer at a time across threads and processes, with a bounded wait.

Like SQLite's: any number of processes open one engine directory; a write takes the lock,
and waits at most ``busy_timeout`` seconds for the write in progress to finish. Two
layers make it up:

- a re-entrant ``threading.RLock`` for the threads of this process (``flock`` belongs to
  an open file, so threads sharing one descriptor would not exclude each other), and
- an exclusive ``fcntl.flock`` on a lock file, held only while a write runs. The kernel
  drops it when its process dies, even under SIGKILL: no stale lock to clean up.

``flock`` has no timeout, so the wait polls (0.5 ms, doubling to 20 ms). Readers never
take this lock. On NFS, CIFS and other network filesystems ``flock`` may not exclude
processes on other machines; ``network_filesystem`` names such a filesystem so the
engine can warn.

A plain ``fork`` (``multiprocessing``'s default start method on Linux, pre-fork servers)
copies the descriptor, and a copy shares the parent's open file and so its ``flock``: a
child that outlived a parent SIGKILLed mid-write would keep every other process out, and a
child could take or drop the parent's lock as its own. ``O_CLOEXEC`` covers only ``exec``,
so every live lock is reset in the child (``os.register_at_fork``): its descriptor is
closed without ``LOCK_UN`` (which would release the parent's lock), and its thread lock is
replaced unless the forking thread itself holds it (the others do not exist in the child).
The child holds no ``flock``; it takes one, on a descriptor of its own, when it acquires.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["LOCK_FILE", "WriteLock", "held_by_a_process", "network_filesystem"]

LOCK_FILE = "write.lock"
"""A corpus's write lock, in its directory."""

_FIRST_SLEEP_S = 0.0005
_MAX_SLEEP_S = 0.02

# Every lock not yet garbage-collected, for resetting in a forked child.
_LIVE: weakref.WeakSet[WriteLock] = weakref.WeakSet()

_NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "afs",
        "ceph",
        "glusterfs",
        "lustre",
        "gpfs",
        "fuse.sshfs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "fuse.rclone",
        "virtiofs",
    }
)


class WriteLock:
    """An exclusive, re-entrant, cross-process lock on ``path`` (created on first use).

    ``acquire(timeout)`` returns False when the lock stayed busy for ``timeout`` seconds;
    the same thread may acquire again (each acquire needs its release). ``held`` is True
    while any thread of this process holds it. In a child forked while the lock was held,
    the forking thread's acquires are still to be released (that takes nothing from the
    parent), but the child holds no ``flock``: a nested acquire there waits for one.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._mutex = threading.RLock()
        self._depth = 0
        self._owner: int | None = None  # the holding thread's ident
        self._fd: int | None = None
        self._locked = False  # whether ``_fd`` holds the flock
        self._closed = False
        self._yield_cond = threading.Condition(threading.Lock())
        self._yielding = 0  # waiters (a drop) this process's new acquires yield to
        _LIVE.add(self)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def mutex(self) -> threading.RLock:
        """The in-process half alone: waits for this process's holder, never for another
        process's."""
        return self._mutex

    @property
    def held(self) -> bool:
        """True while a thread of this process holds the lock (any thread)."""
        return self._depth > 0

    @property
    def depth(self) -> int:
        """How many acquires of this process's holder are still to be released (0 in a
        forked child whose holder did not come along)."""
        return self._depth

    @property
    def owned(self) -> bool:
        """True while the calling thread holds the lock."""
        return self._depth > 0 and self._owner == threading.get_ident()

    def acquire(self, timeout: float, give_up: Callable[[], bool] | None = None) -> bool:
        """Wait up to ``timeout`` seconds; False if still busy then, or as soon as
        ``give_up()`` answers True while waiting for another process's ``flock``."""
        deadline = time.monotonic() + max(0.0, timeout)
        if not self._mutex.acquire(timeout=max(0.0, timeout)):
            return False
        try:
            if not self._locked:
                if not self._flock(deadline, give_up):
                    self._mutex.release()
                    return False
                self._locked = True
        except BaseException:
            self._mutex.release()
            raise
        if self._depth == 0:
            self._owner = threading.get_ident()
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._owner = None
        try:
            if self._depth == 0 and self._locked:
                self._locked = False
                if self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._mutex.release()

    @contextlib.contextmanager
    def yielding(self) -> Iterator[None]:
        """While open, this process's new acquires (``wait_while_yielding``) wait: for a
        waiter of this process that takes the lock through another object (a drop). The
        lock has no queue, so writes back to back would take it again the moment it was
        released and starve that waiter."""
        with self._yield_cond:
            self._yielding += 1
        try:
            yield
        finally:
            with self._yield_cond:
                self._yielding -= 1
                self._yield_cond.notify_all()

    def wait_while_yielding(self, timeout: float, give_up: Callable[[], bool]) -> None:
        """Wait up to ``timeout`` seconds while ``yielding`` is open (or until ``give_up()``
        answers True after a ``wake``)."""
        with self._yield_cond:
            self._yield_cond.wait_for(lambda: not self._yielding or give_up(), timeout)

    def wake(self) -> None:
        """Make ``wait_while_yielding`` look at its ``give_up`` again."""
        with self._yield_cond:
            self._yield_cond.notify_all()

    @contextlib.contextmanager
    def holding(self, timeout: float) -> Iterator[bool]:
        """``with lock.holding(t) as got:`` — ``got`` says whether it was acquired."""
        got = self.acquire(timeout)
        try:
            yield got
        finally:
            if got:
                self.release()

    def close(self) -> None:
        """Close the lock file (waits for a holder in this process to finish)."""
        with self._mutex:
            self._closed = True
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
                self._locked = False

    def _after_fork_in_child(self) -> None:
        """In a forked child: forget the parent's descriptor and any holder that did not
        come along. Never ``LOCK_UN`` (that would release the parent's lock) and never a
        blocking acquire (a thread absent from the child may hold the thread lock)."""
        fd, self._fd, self._locked = self._fd, None, False
        # A drop waiting in the parent is no drop here (and its thread is gone).
        self._yield_cond = threading.Condition(threading.Lock())
        self._yielding = 0
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self._mutex.acquire(blocking=False):
            # Free, or held by the forking thread, which lives on here and releases it.
            self._mutex.release()
        else:
            # Held by a thread that does not exist in the child.
            self._mutex = threading.RLock()
            self._depth = 0
            self._owner = None

    def _flock(self, deadline: float, give_up: Callable[[], bool] | None) -> bool:
        if self._closed:
            raise OSError(f"the lock {self._path} is closed")
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        sleep = _FIRST_SLEEP_S
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (give_up is not None and give_up()):
                return False
            time.sleep(min(sleep, remaining))
            sleep = min(sleep * 2, _MAX_SLEEP_S)


def _after_fork_in_child() -> None:
    for lock in list(_LIVE):
        lock._after_fork_in_child()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def held_by_a_process(path: Path) -> bool:
    """Whether some process — this one included — holds the write lock at ``path`` now.
    A probe that never waits: a shared ``flock`` on a read-only descriptor, dropped at
    once (it works where the directory cannot be written). False when there is no lock
    file; True when the probe cannot tell (the caller keeps trusting a live writer)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError: an exclusive holder; anything else: cannot tell
        return True
    finally:
        os.close(fd)  # drops the probe's shared lock with it
    return False


def network_filesystem(path: Path, mountinfo: str | None = None) -> str | None:
    """The type of the network filesystem ``path`` lives on, or None (local, or unknown).

    Reads Linux's ``/proc/self/mountinfo`` unless ``mountinfo`` (its text) is given; the
    mount point that is the longest prefix of ``path`` decides.
    """
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
        except OSError:
            return None
    target = str(path.resolve())
    best, best_type = "", ""
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        mount = fields[4].replace("\\040", " ")
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, best_type = mount, right.split()[0]
    return best_type if best_type in _NETWORK_FILESYSTEMS else None
