"""Clamp rules for what a user types: every input is a normal call, nothing is rejected.

Pure functions; the facade applies them before any backend sees the query.

- text: non-strings count as empty; lone surrogates replaced; trimmed; truncated to
  ``MAX_QUERY_LENGTH`` and trimmed again; shorter than ``MIN_QUERY_LENGTH`` -> ``None``
  (the facade answers ``[]``).
- limit: integers and finite floats (truncated) are clamped to ``1..MAX_SOURCES``;
  ``+inf`` -> ``MAX_SOURCES``; ``-inf`` -> 1; NaN, ``None`` and anything else ->
  ``FALLBACK_LIMIT``.
- language: ``None`` -> ``None`` (any language); integers and finite floats (truncated);
  negative -> 0; NaN, infinities and anything else -> 0 (the default language).
"""

from __future__ import annotations

import math
import operator

from sparse.contracts import MAX_QUERY_LENGTH, MAX_SOURCES, MIN_QUERY_LENGTH

FALLBACK_LIMIT = 10
"""The limit used when ``limit`` is not a number at all (``None``, NaN, a string)."""


def clamp_text(query: object) -> str | None:
    """The trimmed, truncated query text, or ``None`` when it is too short to search."""
    if not isinstance(query, str):
        return None
    text = query.strip()[:MAX_QUERY_LENGTH].strip()
    # Lone surrogates (possible in a Python str, never valid UTF-8) would make every
    # backend fail on encoding; replace them so the rest of the query is still searched.
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if len(text) >= MIN_QUERY_LENGTH else None


def clamp_limit(limit: object) -> int:
    """``limit`` clamped to ``1..MAX_SOURCES`` (see the module docstring)."""
    number = _as_int(limit, nan=None, pos_inf=MAX_SOURCES, neg_inf=1)
    if number is None:
        return FALLBACK_LIMIT
    return min(max(number, 1), MAX_SOURCES)


def clamp_language(language_id: object) -> int | None:
    """``None`` stays ``None``; anything else becomes a language id >= 0."""
    if language_id is None:
        return None
    number = _as_int(language_id, nan=0, pos_inf=0, neg_inf=0)
    return 0 if number is None else max(number, 0)


def _as_int(value: object, *, nan: int | None, pos_inf: int, neg_inf: int) -> int | None:
    if isinstance(value, float):
        if math.isnan(value):
            return nan
        if math.isinf(value):
            return pos_inf if value > 0 else neg_inf
        return int(value)
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None
