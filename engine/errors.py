"""The engine's exceptions: one root, a few precise leaves.

Argument errors also derive from ``ValueError`` so generic callers can catch them the
usual way. Everything else that escapes the public API derives from ``EngineError``.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

if TYPE_CHECKING:
    from engine.documents import GrepMatch


class EngineError(Exception):
    """Root of every exception the engine raises on purpose."""


class InvalidArgument(EngineError, ValueError):
    """A caller passed something the engine refuses (bad name, oversized document, ...)."""


class CorpusNotFound(EngineError, KeyError):
    """No corpus of that name exists in this engine."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "corpus not found"


class CorpusExists(EngineError):
    """``create_corpus`` was asked for a name that is already taken."""


class SourceNotFound(EngineError, KeyError):
    """The source id is unknown, or not visible to the caller (the two look the same)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "source not found"


class EngineLocked(EngineError):
    """The engine directory's write lock is held elsewhere (base of ``EngineBusy``)."""


class EngineBusy(EngineLocked):
    """A write waited its whole ``busy_timeout`` for another write (another process, or
    another thread or engine of this one) to finish; nothing of it was written."""


class EngineReadOnly(EngineError):
    """A write was asked of an engine opened with ``read_only=True`` (or of a directory a
    read-only engine cannot open)."""


class StorageError(EngineError):
    """The document store or an index file could not complete a read or a write (disk
    full, I/O error, a closed or damaged database, ...)."""


class GrepTimeout(EngineError):
    """``grep`` used up its time budget before it had read every public source.

    The answer would be incomplete, so it is an error, never a short list. ``matches``
    holds what was found before the budget ran out (for callers that want it anyway).
    """

    def __init__(self, message: str, matches: tuple[GrepMatch, ...] = ()) -> None:
        super().__init__(message)
        self.matches = matches


# -- the library boundary -----------------------------------------------------------------

_P = ParamSpec("_P")
_R = TypeVar("_R")


def sealed(method: Callable[_P, _R]) -> Callable[_P, _R]:
    """Map the storage layer's own exceptions to ``StorageError`` at a public method.

    The one place where SQLite's and the file system's errors become the engine's: an
    engine error passes unchanged, ``sqlite3.Error`` and ``OSError`` become
    ``StorageError`` (chained, so the cause stays visible), and anything else — a bug —
    propagates as it is rather than being disguised.
    """

    @functools.wraps(method)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(*args, **kwargs)
        except EngineError:
            raise
        except (sqlite3.Error, OSError) as exc:
            raise storage_error(exc) from exc

    return call


def storage_error(exc: sqlite3.Error | OSError) -> StorageError:
    """The engine's words for a storage layer's exception (``sealed`` raises them)."""
    if isinstance(exc, sqlite3.Error):
        return StorageError(f"the document store failed ({type(exc).__name__}: {exc})")
    return StorageError(f"storage I/O failed ({type(exc).__name__}: {exc})")
