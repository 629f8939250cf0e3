"""Match excerpts: a window of at most ``MAX_EXCERPT_LENGTH`` characters around a match.

Computed in Python from the stored body (a ``str.find`` per term), which costs a few
microseconds per hit where tantivy's ``SnippetGenerator`` would re-analyze the document.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from sparse.contracts import MAX_EXCERPT_LENGTH

_LEAD_FRACTION = 4
"""The match starts about a quarter into the window, so the excerpt shows its context."""


def _ascii_form(character: str) -> str | None:
    """The one ASCII letter a Latin letter with diacritics folds to, if it has one."""
    base = unicodedata.normalize("NFKD", character)[:1]
    return base if base.isascii() and base.isalpha() else None


_FOLD_ONE_TO_ONE: Mapping[int, str] = MappingProxyType(
    {
        ord(character): folded
        for character in map(chr, range(0xC0, 0x250))
        if (folded := _ascii_form(character)) is not None
    }
)
"""Latin-1 Supplement and Latin Extended-A/B letters to their ASCII letter, one character
each (``ß``, ``æ`` and other letters that fold to two are left as they are)."""


def make_excerpt(text: str, terms: Sequence[str], max_length: int = MAX_EXCERPT_LENGTH) -> str:
    """At most ``max_length`` characters of ``text`` around the best match.

    ``terms`` are lowercase and best first (the caller orders them, rarest first): the
    window is placed around the first occurrence, at the start of a word, of the first
    term that occurs at all. A term matches as a word prefix, so a stem (``studi``) finds
    its surface form (``studies``). No match: the start of ``text``. Cuts fall on
    whitespace when there is some nearby.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    if len(text) <= max_length:
        return text
    lowered = text.lower()
    if len(lowered) != len(text):  # rare case-mappings change lengths; match as written
        lowered = text
    position = _first_match(lowered, terms)
    if position is None and not lowered.isascii():
        # The index folds accents (``analyzers``): "meniere" found "Ménière"; look for
        # it in a copy folded letter for letter, so positions still index ``text``.
        position = _first_match(lowered.translate(_FOLD_ONE_TO_ONE), terms)
    if position is None:
        return _cut(text, 0, max_length)
    start = max(0, position - max_length // _LEAD_FRACTION)
    start = min(start, len(text) - max_length)
    return _cut(text, start, max_length)


def _first_match(lowered: str, terms: Sequence[str]) -> int | None:
    for term in terms:
        if not term:
            continue
        position = lowered.find(term)
        while position != -1:
            if position == 0 or not lowered[position - 1].isalnum():
                return position
            position = lowered.find(term, position + 1)
    return None


def _cut(text: str, start: int, max_length: int) -> str:
    end = start + max_length
    if start > 0:
        space = text.find(" ", start, start + max_length // 6)
        if space != -1:
            start = space + 1
    if end < len(text):
        space = text.rfind(" ", start + max_length // 2, end)
        if space != -1:
            end = space
    return text[start:end].strip()
