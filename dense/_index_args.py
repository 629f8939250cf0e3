"""Checks of ``FaissIndex``'s constructor arguments: ``ValueError`` naming the argument.

A saved file's parameters come back through the same constructor, so a damaged header
fails here too (``FaissIndex.load`` reports it as a damaged file)."""

from __future__ import annotations

from typing import Any

from dense._graph import VectorStorage

_LOWEST = {  # integer arguments and their smallest valid value
    "dimension": 1,
    "hnsw_threshold": 0,
    "hnsw_m": 2,
    "ef_construction": 1,
    "ef_search": 1,
    "exact_filter_limit": 0,
}


def check_args(*, build_delay_s: Any, search_threads: Any, **counts: Any) -> None:
    """``counts``: the integer arguments of ``_LOWEST``, by name."""
    checked_delay(build_delay_s)
    if search_threads is not None and not _int_at_least(search_threads, 1):
        raise ValueError(f"search_threads must be an int >= 1 or None, got {search_threads!r}")
    for name, value in counts.items():
        low = _LOWEST[name]
        if not _int_at_least(value, low):
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def _int_at_least(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def checked_delay(value: Any) -> float:
    """``build_delay_s``: 0..3600 seconds (NaN and infinities refused: NaN made a waiting
    builder spin, infinity killed its thread); else ``ValueError``."""
    if not isinstance(value, int | float) or not 0 <= value <= 3600:
        raise ValueError(f"build_delay_s must be 0..3600 seconds, got {value!r}")
    return float(value)


def checked_count(name: str, value: Any) -> int:
    """``value`` if it is a valid ``name`` (an integer argument of ``_LOWEST``), for the
    build parameters set on an index after it was made; else ``ValueError``."""
    low = _LOWEST[name]
    if not _int_at_least(value, low):
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return int(value)


def as_storage(value: Any) -> VectorStorage:
    """A ``VectorStorage`` or its name (``"float32"``, ``"sq8"``); else ``ValueError``."""
    if isinstance(value, VectorStorage):
        return value
    if not isinstance(value, str):
        raise ValueError(f"storage must be a VectorStorage or its name, got {value!r}")
    return VectorStorage.from_str(value)
