"""Excerpts for passages the keyword index did not supply (dense-only hits, the
database fallback, the hybrid arm's id-only keyword hits).

The window logic is the keyword arm's own (``sparse.excerpt``), so every passage's
excerpt is cut the same way whichever arm found it.
"""

from __future__ import annotations

import re

from sparse.excerpt import make_excerpt

__all__ = ["excerpt_for", "make_excerpt", "query_terms"]

_WORD = re.compile(r"\w{2,}", re.UNICODE)
_MAX_TERMS = 16


def query_terms(query: str) -> list[str]:
    """Distinct lower-cased words of a query, longest first (better anchors), capped."""
    words = {w.lower() for w in _WORD.findall(query[:2_000])}
    return sorted(words, key=lambda w: (-len(w), w))[:_MAX_TERMS]


def excerpt_for(text: str, terms: list[str]) -> str:
    """An excerpt anchored on the query term that is rarest *in this text* (the keyword
    arm anchors on the rarest term in the index; within one document, fewest occurrences
    is the closest cheap proxy — "needle" beats "filler" that appears everywhere)."""
    lowered = text.lower()
    counts = {t: lowered.count(t) for t in terms}
    ordered = sorted((t for t in terms if counts[t]), key=lambda t: (counts[t], -len(t), t))
    return make_excerpt(text, ordered or terms)
