"""Checks of ``FaissIndex``'s constructor arguments: ``ValueError`` naming the argument.

A saved file's parameters come back through the same constructor, so a damaged header
fails here too (``FaissIndex.load`` reports it as a damaged file)."""

from __future__ import annotations

from typing import Any

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
    if not isinstance(build_delay_s, int | float) or not 0 <= build_delay_s <= 3600:
        raise ValueError(f"build_delay_s must be 0..3600 seconds, got {build_delay_s!r}")
    if search_threads is not None and not _int_at_least(search_threads, 1):
        raise ValueError(f"search_threads must be an int >= 1 or None, got {search_threads!r}")
    for name, value in counts.items():
        low = _LOWEST[name]
        if not _int_at_least(value, low):
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def _int_at_least(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low
