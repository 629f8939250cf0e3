"""The one exception root of ``sparse`` and its few specialisations.

Only index maintenance (``TantivyIndex.upsert``/``delete``/``clear``) raises these to
callers; searching through the facade never raises at all.
"""

from __future__ import annotations


class SparseError(Exception):
    """Root of every error raised by ``sparse``."""


class SparseIndexCorruptError(SparseError):
    """The index directory is missing, unreadable or not a compatible tantivy index.

    The index is derived data: the owner rebuilds it (``clear()`` then ``upsert``).
    """


class SparseIndexLockedError(SparseError):
    """Another writer holds the index's writer lock; nothing was written. Retry later."""
