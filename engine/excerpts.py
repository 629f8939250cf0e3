"""Excerpts: a short window of stored text around the first query-term match.

Cheap on purpose (one lower-cased scan per term): it runs on every hit of every search.
"""

from __future__ import annotations

import re

from sparse import MAX_EXCERPT_LENGTH

_WORD = re.compile(r"\w{2,}", re.UNICODE)
_MAX_TERMS = 16


def query_terms(query: str) -> list[str]:
    """Distinct lower-cased words of a query, longest first (better anchors), capped."""
    words = {w.lower() for w in _WORD.findall(query[:2_000])}
    return sorted(words, key=lambda w: (-len(w), w))[:_MAX_TERMS]


def make_excerpt(text: str, terms: list[str], max_length: int = MAX_EXCERPT_LENGTH) -> str:
    """At most ``max_length`` characters of ``text``, centred near the earliest match."""
    if len(text) <= max_length:
        return text
    lowered = text.lower()
    positions = [p for p in (lowered.find(t) for t in terms) if p >= 0]
    if not positions:
        return _trim_end(text[:max_length])
    anchor = min(positions)
    start = max(0, anchor - max_length // 3)
    end = min(len(text), start + max_length)
    start = max(0, end - max_length)
    window = text[start:end]
    if start > 0:
        space = window.find(" ")
        if 0 <= space < 40:
            window = window[space + 1 :]
    if end < len(text):
        window = _trim_end(window)
    return window


def _trim_end(window: str) -> str:
    space = window.rfind(" ")
    return window[:space] if space > len(window) - 40 else window
