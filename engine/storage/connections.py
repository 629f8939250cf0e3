"""The SQLite connections of one store file: one writer, one reader per thread.

The writer (absent when the store is opened read-only) is opened once, in WAL mode with
``synchronous=FULL``. Each thread reads through its own connection, so readers never wait
for each other; a thread's connection is collected with the thread. A read-only store is
read through a ``mode=ro`` URI, or — when the directory cannot hold SQLite's shared-memory
file and no write-ahead log is pending — ``immutable=1``. On a full disk a store that
exists is opened read-only instead of not at all.

A connection opens the store by path, so each checks that the path still names the file
this store opened (another process may have dropped the corpus and created it anew).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import uuid
import weakref
from pathlib import Path

from engine.errors import CorpusNotFound, StorageError
from engine.storage.change_counter import ChangeCounter
from engine.storage.records import ReaderHandle
from engine.storage.schema import SCHEMA, is_store_full, migrate

logger = logging.getLogger(__name__)


class StoreConnections:
    """Opens, hands out and closes the connections of the store at ``path``, and the
    change counter beside it (``None`` when that file cannot be had).

    ``existing``: the store of a corpus that exists (only ``create_corpus`` makes one). A
    file that is gone, empty, or holds no store is then a ``StorageError``: a writer used
    to make a new, empty store in its place, and the corpus's keyword and vector indexes —
    perhaps the last copies of its documents — were then rebuilt empty to agree with it."""

    def __init__(self, path: Path, *, read_only: bool = False, existing: bool = False) -> None:
        self._path = path
        self._read_only = read_only
        self._existing = existing
        self._immutable = False  # read-only and nobody can write: SQLite's immutable=1
        self._no_room = False  # writable, but opened read-only on a full disk
        self._local = threading.local()
        self._all_readers: weakref.WeakSet[ReaderHandle] = weakref.WeakSet()
        self._readers_lock = threading.Lock()
        self._writer: sqlite3.Connection | None = None
        self._closed = False
        self._identity: tuple[int, int] | None = None  # set once the file surely exists
        self._pin: int | None = None  # a descriptor of that file (see ``_remember_file``)
        self.changes: ChangeCounter | None = None
        if read_only:
            self._open_for_reading()
            return
        # Only a store that holds something can be read without a writer: opening a new
        # one on a full disk leaves an empty file, which is no store to read.
        existed = path.is_file() and path.stat().st_size > 0
        if existing and not existed and not _has_log(path):
            raise StorageError(
                f"{path}: the corpus's store is missing or empty; restore it from a backup "
                "(its indexes are left as they are) or drop the corpus"
            )
        try:
            self._writer = self._open_writer()
        except sqlite3.Error as exc:
            if not (existed and out_of_room(exc, path.parent)):
                raise
            # A cleanly closed store has no -wal/-shm files, and a writer must create
            # them even to read: on a full disk the corpus would not open at all. It is
            # read the read-only way instead; a write raises until it is reopened.
            logger.warning(
                "%s: no room to open the store for writing (%s); reading it read-only",
                path.parent.name,
                type(exc).__name__,
            )
            self._read_only = True
            self._no_room = True
            self._open_for_reading()
            return
        try:
            self.changes = ChangeCounter(changes_path(path), writable=True)
        except OSError:  # e.g. no room left: fall back to asking SQLite on every search
            self.changes = None
        self._remember_file()

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def has_writer(self) -> bool:
        return self._writer is not None

    @property
    def writer(self) -> sqlite3.Connection:
        if self._writer is None:
            if self._no_room:
                raise StorageError(
                    f"{self._path}: database or disk is full (it opened without room to "
                    "write; reopen it once there is room)"
                )
            raise StorageError(f"{self._path} is open read-only")
        return self._writer

    def _remember_file(self) -> None:
        """Note the store file's identity, and hold it open: the identity is its (device,
        inode), and an inode is reused once nothing holds the file — a read-only store's
        only connections are its threads', which end with them, so a corpus dropped and
        created anew by another process could get the old number and pass for it."""
        try:
            self._pin = os.open(self._path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            self._pin = None
            self._identity = _identity(self._path)
            return
        st = os.fstat(self._pin)
        self._identity = st.st_dev, st.st_ino

    def _open_for_reading(self) -> None:
        self._remember_file()
        try:  # fails now, clearly, if there is no readable store — holding nothing
            self.reader().execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()
        except BaseException:
            self.close(threading.RLock())
            raise
        with contextlib.suppress(OSError):
            self.changes = ChangeCounter(changes_path(self._path), writable=False)

    def _open_writer(self) -> sqlite3.Connection:
        conn = self._connect()
        try:
            if self._existing and not _holds_a_store(conn):
                raise StorageError(f"{self._path} holds no Tandem store (no meta table)")
            with conn:
                conn.executescript(SCHEMA)
                conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('seq', '0')")
                conn.execute(  # names this store in the index files it derives
                    "INSERT OR IGNORE INTO meta(key, value) VALUES ('store_id', ?)",
                    (uuid.uuid4().hex,),
                )
            migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA busy_timeout=10000")
        except BaseException:
            conn.close()
            raise
        return conn

    def _connect_read_only(self) -> sqlite3.Connection:
        uri = self._path.resolve().as_uri()
        if not self._immutable:
            conn = sqlite3.connect(
                f"{uri}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
            )
            try:
                conn.execute("PRAGMA busy_timeout=10000")
                conn.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()
                return conn
            except sqlite3.Error as exc:
                conn.close()
                wal = self._path.with_name(self._path.name + "-wal")
                if not self._path.is_file() or (wal.exists() and wal.stat().st_size > 0):
                    # A pending log must not be skipped: immutable=1 would ignore it.
                    raise StorageError(f"cannot open {self._path} read-only: {exc}") from exc
                self._immutable = True
        return sqlite3.connect(
            f"{uri}?immutable=1", uri=True, check_same_thread=False, isolation_level=None
        )

    def reader_handle(self) -> ReaderHandle:
        """This thread's read connection and what it last saw, connected on first use."""
        handle: ReaderHandle | None = getattr(self._local, "reader", None)
        if handle is not None and handle.conn is not None:
            return handle
        if self._closed:
            raise StorageError(f"{self._path} is closed")
        self._check_same_file()
        if self._read_only:
            conn = self._connect_read_only()
        else:
            conn = self._connect()
            conn.execute("PRAGMA query_only=1")
        try:
            self._check_same_file()  # a re-create between the check and the connect
        except CorpusNotFound:
            conn.close()
            raise
        handle = ReaderHandle(conn, immutable=self._read_only and self._immutable)
        self._local.reader = handle
        with self._readers_lock:
            self._all_readers.add(handle)
        return handle

    def current_handle(self) -> ReaderHandle | None:
        """This thread's read connection if it has one (no connecting)."""
        return getattr(self._local, "reader", None)

    def reader(self) -> sqlite3.Connection:
        """This thread's read connection."""
        conn = self.reader_handle().conn
        assert conn is not None  # reader_handle connects a closed handle again
        return conn

    def leave_immutable(self) -> ReaderHandle:
        """Reconnect this thread the ordinary read-only way: ``immutable=1`` ignores the
        log and never sees a commit, and one was made — its writer made the files the
        ordinary way needs."""
        handle: ReaderHandle | None = getattr(self._local, "reader", None)
        if handle is not None:
            handle.close()
        self._local.reader = None
        self._immutable = False
        return self.reader_handle()

    def same_file(self) -> bool:
        """False once the store's path names another file or none (the corpus was dropped,
        and perhaps created anew, by another process)."""
        return self._identity is None or _identity(self._path) == self._identity

    def _check_same_file(self) -> None:
        """A thread's first connection opens the store by path: after a drop elsewhere it
        would read another corpus's file, or none."""
        if not self.same_file():
            raise CorpusNotFound(f"corpus {self._path.parent.name!r} was dropped")

    def reader_count(self) -> int:
        with self._readers_lock:
            return len(self._all_readers)

    def close(self, write_lock: threading.RLock) -> None:
        """Close every connection; the writer once ``write_lock`` is free."""
        self._closed = True
        with self._readers_lock:
            for handle in list(self._all_readers):
                handle.close()
            self._all_readers.clear()
        with write_lock:
            if self._writer is not None:
                self._writer.close()
            if self.changes is not None:
                self.changes.close()
            # Last: closing any descriptor of the file drops this process's POSIX locks
            # on it, SQLite's included, so only once no connection is left.
            pin, self._pin = self._pin, None
            if pin is not None:
                with contextlib.suppress(OSError):
                    os.close(pin)


def changes_path(store_path: Path) -> Path:
    """The change counter's file beside the store at ``store_path``."""
    return store_path.with_name(store_path.name + ".changes")


def _identity(path: Path) -> tuple[int, int] | None:
    """The file's (device, inode), or None when there is none at ``path``."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


# Besides SQLITE_FULL (``is_store_full``), SQLITE_IOERR (and its extended codes) and
# SQLITE_CANTOPEN are also what creating the -wal/-shm files on a full disk fails with,
# but also a permission, a descriptor limit or a real I/O error: those count as no room
# only when the filesystem has no block left.
_SQLITE_IOERR, _SQLITE_CANTOPEN = 10, 14


def out_of_room(exc: sqlite3.Error, directory: Path) -> bool:
    """Whether ``exc`` says the disk holding ``directory`` is full."""
    if is_store_full(exc):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if not isinstance(code, int) or code & 0xFF not in (_SQLITE_IOERR, _SQLITE_CANTOPEN):
        return False
    try:
        return os.statvfs(directory).f_bavail == 0
    except OSError:
        return False


def _has_log(path: Path) -> bool:
    """A write-ahead log with something in it beside ``path``: a store whose pages are
    all still in its log is a store, whatever the size of its main file."""
    wal = path.with_name(path.name + "-wal")
    try:
        return wal.stat().st_size > 0
    except OSError:
        return False


def _holds_a_store(conn: sqlite3.Connection) -> bool:
    """Whether the database holds the ``meta`` table every store has had from the first."""
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'")
    return row.fetchone() is not None
