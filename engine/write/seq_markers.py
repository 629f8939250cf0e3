"""The small files that say which store ``seq`` a derived index reflects.

Each is written after the index itself (to a temporary name, fsynced, renamed), so a
marker may lag its index after a crash, never run ahead of it. A missing or unreadable
marker reads as -1: nothing is known, rebuild or replay from the start.
"""

from __future__ import annotations

import os
from pathlib import Path


def read_marker(path: Path) -> int:
    try:
        return int(path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return -1


def write_marker(path: Path, seq: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(str(seq))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
