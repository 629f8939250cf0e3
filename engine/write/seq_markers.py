"""The small files that say which store ``seq`` a derived index reflects.

Each is written after the index itself (to a temporary name, fsynced, renamed), so a
marker may lag its index after a crash, never run ahead of it. A missing or unreadable
marker reads as -1: nothing is known, rebuild or replay from the start.

Every write is a new file, so a reader can tell that a marker was written again even
when its ``seq`` did not move (``MarkerReading.stamp``): the keyword index's holder
rewrites it after a commit that changed no ``seq`` (``KeywordIndexKeeper.withdraw``), and
other processes reload their readers at it.

``write_ids``/``read_ids``: a list of source ids kept the same way (``tantivy.withdrawn``:
the documents a withdrawal took out of the keyword index while the store still has them
public, for the next holder to put back if the writer dies before its store write).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from engine.atomic_files import replace_file

Stamp = tuple[int, int]
"""(inode, mtime in ns) of one written marker file."""


class MarkerReading(NamedTuple):
    seq: int
    stamp: Stamp | None  # None: no file could be read


def read_marker(path: Path) -> int:
    return read_marker_stamped(path).seq


def read_marker_stamped(path: Path) -> MarkerReading:
    """The marker's ``seq`` and the stamp of the very file it was read from (``fstat`` of
    the open file: a rename between a ``stat`` and the read cannot pair them wrongly)."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            raw = fh.read()
    except OSError:
        return MarkerReading(-1, None)
    stamp = (st.st_ino, st.st_mtime_ns)
    try:
        return MarkerReading(int(raw.decode("ascii").strip()), stamp)
    except ValueError:  # UnicodeDecodeError included
        return MarkerReading(-1, stamp)


def write_marker(path: Path, seq: int) -> Stamp:
    """Write ``seq`` to ``path``; returns the new file's stamp (a rename keeps it)."""
    st = replace_file(path, str(seq))
    return (st.st_ino, st.st_mtime_ns)


def write_ids(path: Path, ids: Sequence[str]) -> None:
    """Write ``ids`` to ``path`` durably (temporary name, fsync, rename, fsync of the
    directory: the file must outlive a power cut that the index's next commit survives)."""
    replace_file(path, json.dumps(list(ids)), sync_directory=True)


def read_ids(path: Path) -> list[str] | None:
    """The ids ``write_ids`` wrote to ``path``; ``None`` when there is no such file, and
    ``[]`` for one that cannot be read whole (nothing to put back from it: a holder's open
    then finds documents missing by its count check and rebuilds the index)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        return []
    try:
        ids = json.loads(raw)
    except ValueError:
        return []
    return [i for i in ids if isinstance(i, str)] if isinstance(ids, list) else []
