"""Match excerpts: a window of at most ``MAX_EXCERPT_LENGTH`` characters around a match.

Computed in Python from the stored body (a ``str.find`` per occurrence looked at, at
most ``_MAX_OCCURRENCES`` a term), which costs a few microseconds per hit where tantivy's
``SnippetGenerator`` would re-analyze the document.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import regex

from sparse.contracts import MAX_EXCERPT_LENGTH

_LEAD_FRACTION = 4
"""The match starts about a quarter into the window, so the excerpt shows its context."""


def _ascii_form(character: str) -> str | None:
    """The one ASCII letter a Latin letter with diacritics folds to, if it has one."""
    base = unicodedata.normalize("NFKD", character)[:1]
    return base if base.isascii() and base.isalpha() else None


_FOLD_ONE_TO_ONE: Mapping[int, str] = MappingProxyType(
    {
        **{
            ord(character): folded
            for character in map(chr, [*range(0xC0, 0x250), *range(0xFF21, 0xFF5B)])
            if (folded := _ascii_form(character)) is not None
        },
        # letters with a stroke have no decomposition, but the index folds them too
        **{
            ord(letter): folded for letter, folded in zip("ØøŁłĐđĦħıŦŧ", "oollddhhitt", strict=True)
        },
    }
)
"""Latin-1 Supplement and Latin Extended-A/B letters and fullwidth Latin letters to their
ASCII letter, one character each (``ß``, ``æ``, ``ﬁ`` and other letters that fold to two
are left as they are: a position in the folded copy must index the text)."""


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
    lowered = _lower_in_place(text)
    position = _first_match(lowered, terms)
    if position is None and not lowered.isascii():
        # The index folds accents (``analyzers``): "meniere" found "Ménière"; look for
        # it in a copy folded letter for letter, so positions still index ``text``.
        position = _first_match(lowered.translate(_FOLD_ONE_TO_ONE), terms)
        if position is None and not unicodedata.is_normalized("NFC", text):
            # The analyzers read text composed (``Analyzer.prepare``): a match the index
            # found in decomposed text ("Me\u0301nie\u0300re") is looked for composed too
            # (and shown so). Only here: the check costs ~20 us on a 10 KB text.
            return make_excerpt(unicodedata.normalize("NFC", text), terms, max_length)
    if position is None:
        return _cut(text, 0, max_length)
    start = max(0, position - max_length // _LEAD_FRACTION)
    start = min(start, len(text) - max_length)
    return _cut(text, start, max_length)


def _lower_in_place(text: str) -> str:
    """``text.lower()`` with every position still indexing ``text``: the rare characters
    whose lowercase is longer ("İ" -> "i̇") become one stand-in that matches no term."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    longer = {ord(ch): _STAND_IN for ch in set(text) if len(ch.lower()) != 1}
    return text.translate(longer).lower()


_STAND_IN = "\ufffd"


def _first_match(lowered: str, terms: Sequence[str]) -> int | None:
    """Where the first term that occurs at a word start first does so (a term of a
    script written without spaces, such as CJK, anywhere). Each term's first
    ``_MAX_OCCURRENCES`` occurrences are looked at, no more: a megabyte of one repeated
    letter must not make one excerpt cost seconds while the search gate is held."""
    for term in terms:
        if not term:
            continue
        position = lowered.find(term)
        for _ in range(_MAX_OCCURRENCES):
            if position == -1:
                break
            if position == 0 or not lowered[position - 1].isalnum() or _unspaced(term[0]):
                return position
            position = lowered.find(term, position + 1)
    return None


_MAX_OCCURRENCES = 64
"""Occurrences inside words ("studi" in "nonstudies") are rare in real text; 64 of them
before one at a word start is a pathological document, which gets the next term's (or
the text's start) excerpt instead."""

_UNSPACED = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x2E80, 0x9FFF),  # CJK radicals, kana, CJK unified ideographs and extensions
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width katakana
    (0x20000, 0x3FFFF),  # CJK extensions B and later
)


def _unspaced(character: str) -> bool:
    """A character of a script written without spaces between words: the CJK analyzer
    indexes such text character by character, so a term matches anywhere in it."""
    code = ord(character)
    return code >= _UNSPACED[0][0] and any(low <= code <= high for low, high in _UNSPACED)


_GRAPHEME = regex.compile(r"\X")
"""One user-perceived character (an extended grapheme cluster): a letter and its marks, a
flag, an emoji with its modifiers and joined parts, a decomposed Hangul syllable."""
_GRAPHEME_REACH = 64
"""How far around a cut its grapheme is looked for (a longer cluster is cut as before)."""


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
    # No cut inside a character the reader sees as one: without a space nearby the
    # window edge fell there, and an excerpt began with a lone accent or half a flag.
    snapped_start, snapped_end = _boundary(text, start, later=True), _boundary(text, end)
    if snapped_start < snapped_end:
        start, end = snapped_start, snapped_end
    return text[start:end].strip()


def _boundary(text: str, position: int, *, later: bool = False) -> int:
    """``position`` if no grapheme spans it, else the start (or, ``later``, the end) of
    the grapheme that does."""
    if position <= 0 or position >= len(text):
        return position
    pair = text[position - 1 : position + 1]
    if pair.isascii() and pair != "\r\n":  # the common case, without the regex
        return position
    scan = max(0, position - _GRAPHEME_REACH)
    for grapheme in _GRAPHEME.finditer(text, scan, min(len(text), position + _GRAPHEME_REACH)):
        if grapheme.end() <= position:
            continue
        if grapheme.start() >= position:
            return position
        return grapheme.end() if later else grapheme.start()
    return position
