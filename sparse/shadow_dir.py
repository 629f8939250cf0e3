"""A writable stand-in for an index directory this process may read but not write.

tantivy takes a lock file inside the index directory even to open a reader, so it cannot
open an index in a directory it may not write to. ``ShadowDirectory`` is a private temp
directory holding a symbolic link to every file of the real one, and tantivy's lock files
as real, empty files of its own: tantivy reads the index through the links and locks only
its private copies. ``sync()`` links files that appeared since (a writer elsewhere
committed) and drops links whose file is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["ShadowDirectory"]


class ShadowDirectory:
    """Symbolic links to the files of ``source``, in a private temp directory."""

    def __init__(self, source: Path) -> None:
        self._source = source
        self._path = Path(tempfile.mkdtemp(prefix="tandem-readonly-"))

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
        shutil.rmtree(self._path, ignore_errors=True)
