"""Replacing a small file whole: a temporary copy is written and fsynced, then renamed
over the old one (and the directory fsynced too, when the rename itself must survive a
power cut). A reader sees the old file or the new one, never part of either."""

from __future__ import annotations

import os
from pathlib import Path


def replace_file(path: Path, text: str, *, sync_directory: bool = False) -> os.stat_result:
    """Replace ``path`` with ``text`` (UTF-8); returns the new file's ``stat`` (a rename
    keeps its inode and times)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
        written = os.fstat(fh.fileno())
    os.replace(tmp, path)
    if sync_directory:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    return written
