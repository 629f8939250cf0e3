"""A writable stand-in for an index directory this process may read but not write.

tantivy takes a lock file inside the index directory even to open a reader, so it cannot
open an index in a directory it may not write to. ``ShadowDirectory`` is a private temp
directory holding a symbolic link to every file of the real one, and tantivy's lock files
as real, empty files of its own: tantivy reads the index through the links and locks only
its private copies. ``sync()`` links files that appeared since (a writer elsewhere
committed) and drops links whose file is gone.

The directory goes with its owner: at ``close()``, when the object is collected, or at
interpreter exit (``weakref.finalize``). A process that never gets there (SIGKILL,
``os._exit``) holds a ``flock`` on the directory's owner file for as long as it lives,
and the next ``ShadowDirectory`` made on the machine removes every one whose lock it can
take: before, each read-only process that was not closed left its directory behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import weakref
from pathlib import Path

__all__ = ["ShadowDirectory"]


_PREFIX = "tandem-readonly-"
_OWNER = "tandem-owner.lock"  # ends in ".lock": ``sync`` leaves it alone


class ShadowDirectory:
    """Symbolic links to the files of ``source``, in a private temp directory."""

    def __init__(self, source: Path) -> None:
        self._source = source
        _remove_abandoned()
        self._path, owner = _owned_directory()
        # Bound to this process: a forked child inherits the finalizer, and run there (at
        # its exit) it removed the parent's live directory, freezing its keyword reader.
        self._remove = weakref.finalize(self, _remove, self._path, owner, os.getpid())

    @property
    def path(self) -> Path:
        return self._path

    def sync(self) -> Path:
        """Mirror ``source`` as it is now; returns the shadow directory."""
        wanted = set(os.listdir(self._source))
        present = set(os.listdir(self._path))
        for name in wanted - present:
            target = self._path / name
            if name.endswith(".lock"):
                target.touch()
            else:
                os.symlink(self._source / name, target)
        for name in present - wanted:
            if not name.endswith(".lock"):
                with contextlib.suppress(FileNotFoundError):
                    (self._path / name).unlink()
        return self._path

    def close(self) -> None:
        self._remove()


def _owned_directory() -> tuple[Path, int]:
    """A new directory named ``_PREFIX…`` whose owner file this process holds locked.
    Made under another name and renamed: a sweep never sees it before it is locked."""
    making = Path(tempfile.mkdtemp(prefix=".tandem-making-"))
    owner = os.open(making / _OWNER, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(owner, fcntl.LOCK_EX)
        path = making.with_name(_PREFIX + making.name.removeprefix(".tandem-making-"))
        os.rename(making, path)
    except BaseException:
        os.close(owner)
        shutil.rmtree(making, ignore_errors=True)
        raise
    return path, owner


def _remove(path: Path, owner: int, creator: int) -> None:
    """Remove the directory — in the process that made it. In a forked child only its
    copy of the owner descriptor is closed: never ``LOCK_UN``, which would free the
    parent's lock (the lock lasts while any process holds the open file)."""
    if os.getpid() == creator:
        shutil.rmtree(path, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.close(owner)


def _remove_abandoned() -> None:
    """Remove the shadow directories whose owner process is gone (its lock is free)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(tempfile.gettempdir()):
            if entry.name.startswith(_PREFIX) and entry.is_dir(follow_symlinks=False):
                _remove_if_abandoned(Path(entry.path))


def _remove_if_abandoned(path: Path) -> None:
    try:
        fd = os.open(path / _OWNER, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:  # another user's, or one made before owner files: left alone
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its process lives
        return
    finally:
        os.close(fd)
    shutil.rmtree(path, ignore_errors=True)
