"""The engine's exceptions: one root, a few precise leaves.

Argument errors also derive from ``ValueError`` so generic callers can catch them the
usual way. Everything else that escapes the public API derives from ``EngineError``.
"""

from __future__ import annotations


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
    """Another process holds this engine directory open for writing."""


class StorageError(EngineError):
    """The document store could not complete a write (disk full, I/O error, ...)."""
