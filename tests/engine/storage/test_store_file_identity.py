"""A store remembers which file it opened, and holds it so no other file can pass for it."""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from engine import CorpusConfig, Document, SearchEngine, StorageError
from engine.storage.connections import StoreConnections


def _descriptors_of(file: tuple[int, int]) -> int:
    """Descriptors this process holds on the file ``(device, inode)`` (unlinked or not)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += (st.st_dev, st.st_ino) == file
    return count


def test_a_read_only_store_holds_its_file_while_open(tmp_path: Path) -> None:
    """A read-only store's only connections are its threads', closed with them; its
    identity check compares (device, inode), and an inode nothing holds can be handed to
    the next file created — a corpus dropped and re-created by another process could pass
    for the one this store opened. The store holds its file until it is closed."""
    with SearchEngine(tmp_path) as writer:
        writer.create_corpus(CorpusConfig(name="c", embedder=None)).add(
            [Document(id="a", text="kept words")]
        )
    store_file = tmp_path / "corpora" / "c" / "store.sqlite3"
    st = os.stat(store_file)
    file = st.st_dev, st.st_ino
    connections = StoreConnections(store_file, read_only=True)
    try:

        def read_once() -> None:
            connections.reader().execute("SELECT COUNT(*) FROM documents").fetchone()

        thread = threading.Thread(target=read_once)
        thread.start()
        thread.join()
        connections._local.reader.close()  # this thread's too: no connection is left
        assert connections.reader_count() <= 1
        assert _descriptors_of(file) >= 1
        os.unlink(store_file)  # the file goes (a drop elsewhere) ...
        assert not connections.same_file()  # ... and the store knows it is not there
    finally:
        connections.close(threading.RLock())
    assert _descriptors_of(file) == 0  # the store let go of the file


def test_a_file_that_is_no_store_is_refused_holding_nothing(tmp_path: Path) -> None:
    """An open that fails (not a store) releases the file it held and its connection."""
    not_a_store = tmp_path / "store.sqlite3"
    not_a_store.write_bytes(b"this is not an SQLite database, just bytes" * 100)
    st = os.stat(not_a_store)
    with pytest.raises((StorageError, sqlite3.DatabaseError)):
        StoreConnections(not_a_store, read_only=True)
    gc.collect()
    assert _descriptors_of((st.st_dev, st.st_ino)) == 0
