"""Text analyzers, and the map from a document's language id to its analyzer.

Each ``Analyzer`` is a tantivy text-analysis chain registered on the index under
``tokenizer_name`` and indexed into its own field (``field_name``): a multilingual corpus
keeps one BM25 field per analyzer, and a document goes to the field of its language.

Every chain first puts text in Unicode's composed form (NFC), documents and queries alike:
text from macOS file names or some PDF extractions spells ``é`` as ``e`` plus a combining
accent, which the word tokenizer splits at, so ``Ménière`` written that way matched
neither ``Ménière`` nor ``meniere``. Every chain drops tokens of ``MAX_TOKEN_BYTES`` or
more (tantivy counts UTF-8 bytes: 40 bytes dropped the 21-letter Russian
``достопримечательность`` and German compounds).

- ``ENGLISH``: words, long tokens dropped, lowercased, folded to ASCII
  where a letter has an ASCII form (``Ménière`` and ``meniere``, ``naïve`` and ``naive``
  are one term, as LanceDB's default analyzer and Lucene's ``ASCIIFoldingFilter`` make
  them; Greek letters and symbols stay), English stop words removed, Snowball English
  stemming. Folding changed no nDCG@10 of the keyword arm on SciFact, Cranfield or CISI
  (to four decimals, train and test): it is for collections whose writers and readers
  disagree on accents. Title and body share one field, the title repeated
  (``TantivyIndex(title_weight=...)``); this layout reaches nDCG@10 0.691 on SciFact
  (0.684 with the title once; separate ``en_stem`` title/body fields: 0.656). Before
  tokenising (``Analyzer.prepare``, for documents and queries alike), a possessive ``'s``
  and the Latin abbreviations "e.g." and "i.e." are removed, as Lucene's English
  analyzer drops possessives: the word tokenizer would otherwise index them as the
  one-letter words ``s``, ``e``, ``g`` and ``i``. Measured with query term frequency on
  (nDCG@10, test judgements): CISI 0.3686 -> 0.3775, Cranfield 0.3687 -> 0.3689, SciFact
  0.6838 -> 0.6841 (train 0.6957 -> 0.6964). Dropping every one-letter token instead, as
  bm25s's tokenizer does, gained more on CISI (0.3813) but lost on SciFact (0.6811, train
  0.6950), whose "T cells", "vitamin D" and "hepatitis B" need their letter.
- ``GERMAN``, ``FRENCH``, ``SPANISH``, ``ITALIAN``, ``PORTUGUESE``, ``DUTCH``,
  ``SWEDISH``, ``NORWEGIAN``, ``DANISH``, ``FINNISH``, ``HUNGARIAN``, ``RUSSIAN``: words,
  long tokens dropped, lowercased, the language's stop words removed, its Snowball
  stemmer (every language for which tantivy has both a stop list and a stemmer; French
  elisions ``l'``, ``d'``, ``qu'`` go with the stop words).
- ``SIMPLE``: words, lowercased, no stop words, no stemming (any space-delimited script).
- ``CJK``: every Han, Hiragana, Katakana, Hangul or Thai character is its own token
  (unigrams, as Lucene's standard analyzer does for Han); runs of other letters, digits
  and combining marks are words, so ``iPhone用`` is ``iphone`` and ``用`` (a run of
  letters swallowed the Han after it before, and ``iPhone`` matched nothing) and a
  Devanagari word keeps its vowel signs; lowercased. Needs no word boundaries, so text
  in any script stays findable: the fallback for language ids the map does not know, so
  another script never silently returns nothing. (tantivy's n-gram tokenizer would also
  emit tokens spanning spaces.)
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from types import MappingProxyType

import tantivy

MAX_TOKEN_BYTES = 160
"""Tokens of this many UTF-8 bytes or more are dropped (a 10,000-character token matches
nothing): 40 characters of any script, 160 of ASCII. Lucene's standard tokenizer keeps
255 characters."""


class Analyzer(Enum):
    """The closed set of analysis chains; values are stable (they name index fields)."""

    ENGLISH = "en"
    GERMAN = "de"
    FRENCH = "fr"
    SPANISH = "es"
    ITALIAN = "it"
    PORTUGUESE = "pt"
    DUTCH = "nl"
    SWEDISH = "sv"
    NORWEGIAN = "no"
    DANISH = "da"
    FINNISH = "fi"
    HUNGARIAN = "hu"
    RUSSIAN = "ru"
    SIMPLE = "simple"
    CJK = "cjk"

    @classmethod
    def from_str(cls, value: str) -> Analyzer:
        """Look an analyzer up by value or name, case-insensitively."""
        wanted = value.strip().lower()
        for member in cls:
            if wanted in (member.value, member.name.lower()):
                return member
        valid = ", ".join(member.value for member in cls)
        raise ValueError(f"unknown analyzer {value!r}; valid values: {valid}")

    @property
    def tokenizer_name(self) -> str:
        """The name the chain is registered under on a tantivy index.

        It carries the chain's version: a changed chain gets a new name, so an index built
        with the old one no longer matches the schema and its owner rebuilds it.
        """
        version = _CHAIN_VERSIONS.get(self, 1)
        return f"tandem_{self.value}" if version == 1 else f"tandem_{self.value}_v{version}"

    def prepare(self, text: str) -> str:
        """``text`` as this chain's tokenizer receives it (documents and queries alike):
        composed (NFC), then rewritten where the chain has a rewrite."""
        if not text.isascii() and not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)
        rewrite = _PREPARERS.get(self)
        return text if rewrite is None else rewrite(text)

    @property
    def field_name(self) -> str:
        """The indexed (not stored) text field holding title + body for this analyzer."""
        return f"text_{self.value}"

    def build(self) -> tantivy.TextAnalyzer:
        """A fresh tantivy ``TextAnalyzer`` for this chain."""
        return _BUILDERS[self]()


def _words(*filters: tantivy.Filter) -> tantivy.TextAnalyzer:
    builder = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    builder = builder.filter(tantivy.Filter.remove_long(MAX_TOKEN_BYTES))
    builder = builder.filter(tantivy.Filter.lowercase())
    for extra in filters:
        builder = builder.filter(extra)
    return builder.build()


def _english() -> tantivy.TextAnalyzer:
    return _words(
        tantivy.Filter.ascii_fold(),
        tantivy.Filter.stopword("english"),
        tantivy.Filter.stemmer("english"),
    )


def _snowball(language: str) -> Callable[[], tantivy.TextAnalyzer]:
    """The chain of a language with a tantivy stop list and Snowball stemmer."""

    def build() -> tantivy.TextAnalyzer:
        return _words(tantivy.Filter.stopword(language), tantivy.Filter.stemmer(language))

    return build


def _simple() -> tantivy.TextAnalyzer:
    return _words()


_UNIGRAM_SCRIPTS = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\p{Thai}"
_CJK_PATTERN = rf"[{_UNIGRAM_SCRIPTS}]|[[\p{{L}}\p{{N}}\p{{M}}]--[{_UNIGRAM_SCRIPTS}]]+"


def _cjk() -> tantivy.TextAnalyzer:
    builder = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(_CJK_PATTERN))
    builder = builder.filter(tantivy.Filter.remove_long(MAX_TOKEN_BYTES))
    return builder.filter(tantivy.Filter.lowercase()).build()


_POSSESSIVE = re.compile(r"(?<=\w)['\u2019][sS]\b")
_LATIN_ABBREVIATIONS = re.compile(r"\b(?:[eE]\.\s?[gG]|[iI]\.\s?[eE])\.")


_ABBREVIATION_HINTS = (".g.", ".G.", ".e.", ".E.", ". g.", ". G.", ". e.", ". E.")
_POSSESSIVE_HINTS = ("'s", "'S", "\u2019s", "\u2019S")


def _english_text(text: str) -> str:
    """Possessive ``'s`` and the abbreviations "e.g." / "i.e." removed (see the module
    docstring); every other character is left to the tokenizer. Substring checks (C
    speed) keep the regular expressions off the text that has neither."""
    if any(hint in text for hint in _ABBREVIATION_HINTS):
        text = _LATIN_ABBREVIATIONS.sub(" ", text)
    if any(hint in text for hint in _POSSESSIVE_HINTS):
        text = _POSSESSIVE.sub("", text)
    return text


_PREPARERS: Mapping[Analyzer, Callable[[str], str]] = MappingProxyType(
    {Analyzer.ENGLISH: _english_text}
)

_CHAIN_VERSIONS: Mapping[Analyzer, int] = MappingProxyType(
    {analyzer: 4 if analyzer is Analyzer.ENGLISH else 2 for analyzer in Analyzer}
)
"""Chains changed since their first release (ENGLISH 2: ``prepare`` added; 3: ASCII
folding; every chain, ENGLISH 4 and the others 2: NFC, and the long-token cut at 160
bytes instead of 40; CJK's word runs stop at the unigram scripts and keep marks)."""

_BUILDERS: Mapping[Analyzer, Callable[[], tantivy.TextAnalyzer]] = MappingProxyType(
    {
        Analyzer.ENGLISH: _english,
        Analyzer.GERMAN: _snowball("german"),
        Analyzer.FRENCH: _snowball("french"),
        Analyzer.SPANISH: _snowball("spanish"),
        Analyzer.ITALIAN: _snowball("italian"),
        Analyzer.PORTUGUESE: _snowball("portuguese"),
        Analyzer.DUTCH: _snowball("dutch"),
        Analyzer.SWEDISH: _snowball("swedish"),
        Analyzer.NORWEGIAN: _snowball("norwegian"),
        Analyzer.DANISH: _snowball("danish"),
        Analyzer.FINNISH: _snowball("finnish"),
        Analyzer.HUNGARIAN: _snowball("hungarian"),
        Analyzer.RUSSIAN: _snowball("russian"),
        Analyzer.SIMPLE: _simple,
        Analyzer.CJK: _cjk,
    }
)

DEFAULT_LANGUAGE_ANALYZERS: Mapping[int, Analyzer] = MappingProxyType({0: Analyzer.ENGLISH})
"""Language id -> analyzer by default: language 0 is English."""

FALLBACK_ANALYZER = Analyzer.CJK
"""Used for any language id the map does not name."""


@dataclass(frozen=True)
class LanguageAnalyzers:
    """Which analyzer each language id uses; ids not in ``by_language`` use ``fallback``."""

    by_language: Mapping[int, Analyzer] = field(default_factory=lambda: DEFAULT_LANGUAGE_ANALYZERS)
    fallback: Analyzer = FALLBACK_ANALYZER

    def __post_init__(self) -> None:
        for language_id, analyzer in self.by_language.items():
            if isinstance(language_id, bool) or not isinstance(language_id, int):
                raise ValueError(f"language ids must be ints, got {language_id!r}")
            if language_id < 0:
                raise ValueError(f"language ids must be >= 0, got {language_id}")
            if not isinstance(analyzer, Analyzer):
                raise ValueError(f"not an Analyzer: {analyzer!r}")
        if not isinstance(self.fallback, Analyzer):
            raise ValueError(f"not an Analyzer: {self.fallback!r}")
        object.__setattr__(self, "by_language", MappingProxyType(dict(self.by_language)))

    @cached_property
    def routed(self) -> tuple[Analyzer, ...]:
        """Every analyzer a document can go to (the map's and the fallback), in
        ``Analyzer`` order: an index keeps a field for each of these only. Cached: every
        search reads it."""
        used = {*self.by_language.values(), self.fallback}
        return tuple(a for a in Analyzer if a in used)

    def for_language(self, language_id: int) -> Analyzer:
        """The analyzer for ``language_id`` (the fallback when the map does not name it)."""
        return self.by_language.get(language_id, self.fallback)
