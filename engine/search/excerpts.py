"""Excerpts anchored without the keyword index: the database fallback's hits, and
passages cut while the index cannot name the query's rarest words
(``engine.search.passages``; with it, every excerpt anchors on those).

The window logic is the keyword arm's own (``sparse.excerpt``): only the choice of the
anchor word differs (rarest in the text instead of in the index).
"""

from __future__ import annotations

import unicodedata

import regex

from sparse.analyzers import MAX_TOKEN_BYTES
from sparse.excerpt import make_excerpt

__all__ = ["excerpt_for", "make_excerpt", "query_terms"]

_WORD = regex.compile(r"\w{2,}")
"""Letters, digits and the marks on them (``regex``'s ``\\w`` keeps a Devanagari vowel
sign or an accent with no composed form inside its word; ``re``'s splits there)."""
_MAX_TERMS = 8  # each is one scan of the document text
# Never good anchors, and counting them costs a scan each (long questions are full of them).
_FUNCTION_WORDS = (
    "an and are as at be but by can do does for from had has have how if in into is it "
    "its of on or that the their there these they this to was what when where which who "
    "why will with"
)
_STOP_WORDS = frozenset(_FUNCTION_WORDS.split())


def query_terms(query: str) -> list[str]:
    """Distinct lower-cased words of a query, longest first (better anchors), common
    English function words dropped unless nothing else is left, capped. The query is read
    composed (NFC), as the analyzers read it: "Ménière" typed with combining accents is
    one word, not "nie" and "re". Words of ``MAX_TOKEN_BYTES`` UTF-8 bytes or more are
    dropped, as the analyzers drop them (no index holds them; each costs a scan)."""
    query = query[:2_000]
    if not query.isascii():
        query = unicodedata.normalize("NFC", query)
    words = {w.lower() for w in _WORD.findall(query) if _indexable(w)}
    content = {w for w in words if w not in _STOP_WORDS} or words
    return sorted(content, key=lambda w: (-len(w), w))[:_MAX_TERMS]


def _indexable(word: str) -> bool:
    """Kept by the analyzers (``remove_long``): fewer than ``MAX_TOKEN_BYTES`` bytes."""
    return len(word) < MAX_TOKEN_BYTES and len(word.encode()) < MAX_TOKEN_BYTES


def excerpt_for(text: str, terms: list[str]) -> str:
    """An excerpt anchored on the query term that is rarest *in this text* (the keyword
    arm anchors on the rarest term in the index; within one document, fewest occurrences
    is the closest cheap proxy — "needle" beats "filler" that appears everywhere)."""
    lowered = text.lower()
    counts = {t: lowered.count(t) for t in terms}
    ordered = sorted((t for t in terms if counts[t]), key=lambda t: (counts[t], -len(t), t))
    return make_excerpt(text, ordered or terms)
