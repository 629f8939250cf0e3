"""Reading chosen rows of a float32 section of a file with ``pread``, not through a map.

An SQ8 graph re-ranks twice k candidates per search exactly from the float vectors, which a
reopened index keeps in its saved file. Read through a memory map, those few rows made
the whole section resident: each page fault on a mapped file maps a block of
neighbouring pages too (fault-around; whole large folios on recent kernels), so after 50
searches over 200,000 vectors 97 % of the 293 MiB section was resident and the "smaller"
index used more memory than float32. ``pread`` copies just the rows; the pages stay in
the page cache, which the kernel reclaims as it needs, and out of the process's memory.

The descriptor is a duplicate taken from the same open file as the map, so it reads the
same inode even after a later save renames a new file over the path.
"""

from __future__ import annotations

import os
import weakref

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]
Labels = npt.NDArray[np.int64]


class RowReader:
    """Rows of an ``(n, dim)`` little-endian float32 section at ``offset`` of the file
    open as ``fd`` (the reader owns ``fd`` and closes it when it is collected)."""

    def __init__(self, fd: int, offset: int, shape: tuple[int, int]) -> None:
        self._fd = fd
        self._offset = offset
        self.shape = shape
        self._row_bytes = shape[1] * 4
        self._closer = weakref.finalize(self, os.close, fd)

    def rows(self, rows: Labels) -> Vectors:
        """The vectors of ``rows``, in the given order."""
        out = np.empty((int(rows.shape[0]), self.shape[1]), dtype=np.float32)
        size = self._row_bytes
        for i, row in enumerate(rows.tolist()):
            if not 0 <= row < self.shape[0]:
                raise IndexError(f"row {row} outside the section")
            data = os.pread(self._fd, size, self._offset + row * size)
            if len(data) != size:
                raise OSError(f"short read of row {row}")
            out[i] = np.frombuffer(data, dtype="<f4")
        return out
