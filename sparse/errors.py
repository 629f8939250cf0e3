"""The one exception root of ``sparse`` and its few specialisations.

Only index maintenance (``TantivyIndex.upsert``/``delete``/``clear``) raises these to
callers; searching through the facade never raises at all.
"""

from __future__ import annotations

import traceback


class SparseError(Exception):
    """Root of every error raised by ``sparse``."""


class SparseIndexCorruptError(SparseError):
    """The index directory is missing, unreadable or not a compatible tantivy index.

    The index is derived data: the owner rebuilds it (``clear()`` then ``upsert``).
    """


class SparseIndexLockedError(SparseError):
    """Another writer holds the index's writer lock; nothing was written. Retry later."""


def is_contained(exc: BaseException) -> bool:
    """True for what a "never raises" boundary answers for: every ``Exception``, and a
    panic inside native code. pyo3 raises a Rust panic as ``pyo3_runtime.PanicException``,
    a ``BaseException`` (so ``except Exception`` cannot hide a bug) — and tantivy panics
    when a query reads a damaged segment of an index that opened fine. KeyboardInterrupt,
    SystemExit and the like are never contained."""
    if isinstance(exc, Exception):
        return True
    return any(
        kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"
        for kind in type(exc).__mro__
    )


def frames_of(exc: BaseException) -> str:
    """The traceback of ``exc`` as file/line/function frames only, without its message.

    Where the contract says "never raises", the failure is logged at debug level with
    this: enough to find a bug, while an exception message — which may quote the query
    (tantivy's parse errors do) — never reaches a log.
    """
    return "".join(traceback.format_tb(exc.__traceback__)).rstrip()
