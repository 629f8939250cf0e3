"""The one exception root of ``fusion``."""

from __future__ import annotations


class FusionError(ValueError):
    """A fusion function was called with invalid arguments.

    A ``ValueError`` subclass, so callers that validate arguments generically still catch it.
    """
