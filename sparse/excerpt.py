"""Match excerpts: a window of at most ``MAX_EXCERPT_LENGTH`` characters around a match.

Computed in Python from the stored body (a ``str.find`` per occurrence looked at, at
most ``_MAX_OCCURRENCES`` a term; a term not found as written is looked for in a copy of
the text folded as the index folds accents, made at most once an excerpt and only when
the text holds a character to fold), which costs a few microseconds per hit where
tantivy's ``SnippetGenerator`` would re-analyze the document.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping, Sequence

import regex
import tantivy

from sparse.contracts import MAX_EXCERPT_LENGTH

_LEAD_FRACTION = 4
"""The match starts about a quarter into the window, so the excerpt shows its context."""


_FOLDED_BLOCKS = ((0x80, 0x2C7F), (0xA720, 0xA7FF), (0xFF00, 0xFFEF))
"""Where tantivy's ``ascii_fold`` (Lucene's ``ASCIIFoldingFilter``) maps a letter to one
ASCII letter: Latin-1 through Latin Extended-B, IPA and phonetic extensions, Latin
Extended Additional (Vietnamese), letterlike and enclosed forms, Latin Extended-C and -D,
fullwidth forms (the rest of the Basic Multilingual Plane folds no letter to one)."""


@functools.cache
def _one_to_one_folds() -> Mapping[str, str]:
    """Each character the index folds to one ASCII letter or digit -> that character
    (``ascii_fold``, asked once, lazily): ``é`` -> ``e``, ``ễ`` -> ``e``. Characters that
    fold to two (``æ``, ``ß``) are left out, so that a position in a folded copy of a text
    is one in the text."""
    builder = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.whitespace())
    folder = builder.filter(tantivy.Filter.ascii_fold()).build()
    letters = [
        chr(code)
        for low, high in _FOLDED_BLOCKS
        for code in range(low, high + 1)
        if not chr(code).isspace()
    ]
    folded = folder.analyze(" ".join(letters))
    if len(folded) != len(letters):  # one token a character; anything else: no folding
        return {}
    return {
        letter: form
        for letter, form in zip(letters, folded, strict=True)
        if form != letter and len(form) == 1 and form.isascii() and form.isalnum()
    }


@functools.cache
def _foldable() -> re.Pattern[str] | None:
    """One character class of every character in ``_one_to_one_folds`` (compiled once;
    ``re``, whose class is a bitmap: the ``regex`` module's took ~0.4 ms to scan 1.5 KB
    that held none, ~1 % of ``re``'s speed)."""
    folds = _one_to_one_folds()
    if not folds:
        return None
    return re.compile("[" + "".join(map(re.escape, sorted(folds))) + "]")


def _folded(text: str) -> str:
    """``text`` folded as the index folds it, one character a character (positions are
    unchanged); ``text`` itself when it holds nothing to fold — one scan, in C."""
    pattern = _foldable()
    if pattern is None or text.isascii() or pattern.search(text) is None:
        return text
    folds = _one_to_one_folds()
    return pattern.sub(lambda match: folds[match.group()], text)


def make_excerpt(text: str, terms: Sequence[str], max_length: int = MAX_EXCERPT_LENGTH) -> str:
    """At most ``max_length`` characters of ``text`` around the best match.

    ``terms`` are lowercase and best first (the caller orders them, rarest first): the
    window is placed around the first occurrence, at the start of a word, of the first
    term that occurs at all — as written or with the accents the index folds ("meniere"
    finds "Ménière", "nguyen" "Nguyễn"), both tried before the next term. A term matches
    as a word prefix, so a stem (``studi``) finds its surface form (``studies``), but a
    whole word soon after wins over a longer word ("cat" over "category"). No match: the
    start of ``text``. Cuts fall on whitespace when there is some nearby.
    """
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    if len(text) <= max_length:
        return text
    lowered = _lower_in_place(text)
    position = _first_match(lowered, terms)
    if position is None and not text.isascii() and not unicodedata.is_normalized("NFC", text):
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
    """Where the first term that occurs at a word start (a term of a script written
    without spaces, such as CJK, anywhere) does so: as written, else folded as the index
    folds accents ("meniere" in "Ménière"), before the next term is tried. The folded copy
    of the text is made once, and only if a term is not found as written."""
    folded: str | None = None
    for term in terms:
        if not term:
            continue
        position = _best_occurrence(lowered, term)
        if position is None:
            if folded is None:
                folded = _folded(lowered)
            plain = _folded(term)
            if folded is not lowered or plain is not term:
                position = _best_occurrence(folded, plain)
        if position is not None:
            return position
    return None


def _best_occurrence(lowered: str, term: str) -> int | None:
    """The first occurrence of ``term`` at a word start, unless one of the next
    ``_WHOLE_WORD_LOOKS`` there is a whole word ("cat" after "category"; a stem, "studi"
    in "studies", keeps its first). Of an unspaced term, the first occurrence. At most
    ``_MAX_OCCURRENCES`` occurrences are looked at: a megabyte of one repeated letter must
    not make one excerpt cost seconds while the search gate is held."""
    anywhere = _unspaced(term[0])
    first: int | None = None
    looks = 0
    start = 0
    for _ in range(_MAX_OCCURRENCES):
        position = lowered.find(term, start)
        if position == -1:
            return first
        if anywhere:
            return position
        start = position + 1
        if position and lowered[position - 1].isalnum():
            continue
        end = position + len(term)
        if end == len(lowered) or not lowered[end].isalnum():
            return position
        if first is None:
            first = position
        else:
            looks += 1
            if looks >= _WHOLE_WORD_LOOKS:
                return first
    return first


_WHOLE_WORD_LOOKS = 8
"""How many further occurrences at a word start may replace the first, when it is inside
a longer word, with a whole word: a stem ("diseas") is never one, and each look is a
``str.find`` on the hot path (all of them ~3 us on 10 KB of a frequent stem)."""

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
