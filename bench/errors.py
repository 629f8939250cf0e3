"""The one exception root of ``bench``."""

from __future__ import annotations


class BenchError(Exception):
    """Root of every exception ``bench`` raises on purpose."""


class DatasetError(BenchError):
    """A BEIR folder is missing a file or holds a malformed line."""


class SystemUnavailable(BenchError):
    """A system cannot run here (its package is not installed, or the engine is missing)."""
