"""The keyword-search contracts: the public facade and the internal backend seam.

Public (the engine, the benchmark and users rely on these names and semantics):
``KeywordSearch``, ``KeywordHit``, the limits (``MAX_QUERY_LENGTH``, ``MIN_QUERY_LENGTH``,
``MAX_SOURCES``, ``MAX_EXCERPT_LENGTH``) and the filter and document types an owner of
documents uses (``FieldKind``, ``TermsFilter``, ``RangeFilter``, ``SparseDocument``).

Internal seam, free to change without touching any caller of the facade:
``SearchBackend`` and what flows through it (``RetrievalQuery``, ``AccessContext``,
``EvidenceSource``, ``RetrievalResult``). Backend implementations and the cascade live
in sibling modules.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias, runtime_checkable

MAX_QUERY_LENGTH = 4_096
"""Queries are trimmed and then truncated to this many characters (never rejected).

Long enough for a whole question or argument: collections whose queries are paragraphs
(CISI's longest is 2,023 characters; ArguAna's queries average ~190 words) lost their
tail to the earlier cap of 1,000 — measured on CISI (5 of 76 queries longer), keyword
arm 0.3866 -> 0.3876 and hybrid 0.4413 -> 0.4424 nDCG@10, SciFact and Cranfield (no
query over 266 characters) unchanged. The dense arm reads 256 word pieces of it (the
model's limit); the keyword arm at most ``MAX_QUERY_TERMS`` distinct terms."""

MIN_QUERY_LENGTH = 2
"""A trimmed query shorter than this returns ``[]``."""

MAX_SOURCES = 1_200
"""``limit`` is clamped to ``1..MAX_SOURCES``: room for a fusion window of 100-200 and
for the deepest page a caller of ``engine`` may ask for (offset 1,000 + 200 hits)."""

MAX_EXCERPT_LENGTH = 300
"""An excerpt is at most this many characters, cut around the best match."""


@dataclass(frozen=True, slots=True)
class KeywordHit:
    """One keyword-search result, as the facade returns it.

    ``score`` is backend-native: comparable within one answer, never across backends.
    There is deliberately no backend label: which engine answered is internal.
    """

    source_id: str
    title: str
    url: str
    excerpt: str
    language_id: int = 0
    score: float | None = None
    page_uid: int | None = None


DEFAULT_TITLE_WEIGHT = 3
"""How many times a document's title is indexed ahead of its body (see
``TantivyIndex``). Chosen on SciFact's training judgements (809 queries, nDCG@10 of the
keyword arm): weights 1 / 2 / 3 / 4 / 5 / 6 give 0.6964 / 0.6992 / 0.7008 / 0.7020 /
0.7010 / 0.6992; 4 is the best and 3 the smallest weight within one paired standard error
of it (-0.0011, SE 0.0014; 2 is -0.0028, SE 0.0021), the usual rule for preferring the
simpler setting when the data cannot tell them apart: a heavier title costs more on
collections whose titles say little (many passages sharing one article title)."""

MAX_TITLE_WEIGHT = 8
"""The largest title weight an index accepts."""


MAX_FIELD_NAME_LENGTH = 64
"""A filterable field's name: 1-64 characters of ``a-z``, ``0-9`` and ``_``, a letter first."""

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


class FieldKind(enum.Enum):
    """How a filterable field is indexed: exact strings, or 64-bit integers (ranges).

    Dates are integers here (the owner of the documents picks the encoding, e.g. days
    since 1970-01-01), so every range is an integer range.
    """

    KEYWORD = "keyword"
    INTEGER = "integer"


_FIELD_NAME = re.compile(rf"[a-z][a-z0-9_]{{0,{MAX_FIELD_NAME_LENGTH - 1}}}")


def is_field_name(value: object) -> bool:
    """True for a valid filterable-field name (see ``MAX_FIELD_NAME_LENGTH``)."""
    return isinstance(value, str) and _FIELD_NAME.fullmatch(value) is not None


def _is_int64(value: object) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and _INT64_MIN <= value <= _INT64_MAX
    )


FieldScalar: TypeAlias = str | int
"""One stored field value: a keyword string or a 64-bit integer."""


@dataclass(frozen=True, slots=True)
class TermsFilter:
    """The document has ``field`` equal to one of ``values`` (all ``str`` or all ``int``).

    Empty ``values`` match nothing. A multi-valued field matches when any value does.
    """

    field: str
    values: tuple[FieldScalar, ...]

    def __post_init__(self) -> None:
        if not is_field_name(self.field):
            raise ValueError(f"invalid field name {self.field!r}")
        if not isinstance(self.values, tuple):
            raise ValueError("TermsFilter.values must be a tuple")
        if not (
            all(isinstance(v, str) for v in self.values) or all(_is_int64(v) for v in self.values)
        ):
            raise ValueError(f"values of {self.field!r} must be all str or all 64-bit int")


@dataclass(frozen=True, slots=True)
class RangeFilter:
    """The document has an integer ``field`` value in ``low..high`` (inclusive; ``None``:
    unbounded on that side). ``low > high`` matches nothing."""

    field: str
    low: int | None = None
    high: int | None = None

    def __post_init__(self) -> None:
        if not is_field_name(self.field):
            raise ValueError(f"invalid field name {self.field!r}")
        for bound in (self.low, self.high):
            if bound is not None and not _is_int64(bound):
                raise ValueError(f"range bounds of {self.field!r} must be 64-bit ints or None")
        if self.low is None and self.high is None:
            raise ValueError(f"a range on {self.field!r} needs at least one bound")


FieldFilter: TypeAlias = TermsFilter | RangeFilter
"""One condition of a filter; a query's filters are AND-ed."""


@dataclass(frozen=True, slots=True)
class SparseDocument:
    """A document as an index-backed backend ingests it.

    ``public`` is derived by the owner of the document (no access groups = public);
    non-public documents may be indexed but are never returned to the anonymous visitor.
    """

    source_id: str
    title: str
    text: str
    url: str = ""
    language_id: int = 0
    public: bool = True
    page_uid: int | None = None
    fields: tuple[tuple[str, FieldScalar], ...] = ()
    """Filterable values as ``(field, value)`` pairs; a field may repeat (multi-valued)."""


@dataclass(frozen=True, slots=True)
class AccessContext:
    """Who is searching. Today only the anonymous visitor exists (public documents only);
    the shape leaves room for group-based widening later without changing callers."""

    groups: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def public_only(cls) -> AccessContext:
        return cls()

    @property
    def is_public_only(self) -> bool:
        return not self.groups


@dataclass(frozen=True, slots=True)
class RetrievalQuery:
    """An already-clamped query as backends receive it.

    ``filters`` are AND-ed conditions on declared fields; a backend applies them inside
    its search, before the top ``limit`` is cut (never by post-filtering).
    """

    text: str
    limit: int
    language_id: int | None = None
    filters: tuple[FieldFilter, ...] = ()
    excerpts: bool = True
    """False: the caller needs ranked ids only; backends may leave ``excerpt`` empty."""
    within: frozenset[str] | None = None
    """Only these source ids are eligible (``None``: every document), applied inside the
    search like ``filters``: how a hybrid search asks for the keyword scores of
    candidates that only the vector arm found. Empty matches nothing."""
    statistics: TermStatistics | None = None
    """Score each term with these collection statistics instead of the index's own
    (``TermStatistics``): how one part of a sharded corpus ranks as the whole would."""
    distinct_urls: bool = True
    """True: the retrieval service keeps the best hit per non-empty URL (one answer per
    page). False: every document is its own hit, whatever its URL."""


@dataclass(frozen=True, slots=True)
class TermStatistics:
    """What BM25's idf reads, for the terms of one query.

    ``documents``: the documents of the collection as BM25 counts them (deleted ones an
    index has not merged away yet included); ``doc_freqs``: for each analyzed query term,
    ``((analyzer field, term), documents containing it)``. Statistics of several indexes
    ``combine`` by summing, and a search of one of them scored with the sum gives each
    term the idf that one index holding every document would give it (Elasticsearch's
    ``dfs_query_then_fetch``); length normalisation stays each index's own.
    """

    documents: int
    doc_freqs: tuple[tuple[tuple[str, str], int], ...] = ()

    @staticmethod
    def combine(parts: Iterable[TermStatistics]) -> TermStatistics:
        """The statistics of the collection made of ``parts`` (summed)."""
        documents = 0
        freqs: dict[tuple[str, str], int] = {}
        for part in parts:
            documents += part.documents
            for key, count in part.doc_freqs:
                freqs[key] = freqs.get(key, 0) + count
        return TermStatistics(documents, tuple(freqs.items()))


@dataclass(frozen=True, slots=True)
class EvidenceSource:
    """One source a backend found. Internal to ``sparse`` and its backends."""

    source_id: str
    title: str
    url: str
    excerpt: str
    language_id: int = 0
    score: float | None = None
    page_uid: int | None = None


@dataclass(frozen=True, slots=True)
class RetrievalResult:
    """What the cascade produced, and which backend answered (``None``: nobody did)."""

    sources: tuple[EvidenceSource, ...]
    backend: str | None


@runtime_checkable
class KeywordSearch(Protocol):
    """The keyword-search facade.

    Contract:
    - ``search`` never raises. The query is trimmed and truncated to ``MAX_QUERY_LENGTH``;
      a query shorter than ``MIN_QUERY_LENGTH`` yields ``[]``; ``limit`` is clamped to
      ``1..MAX_SOURCES``; a negative ``language_id`` is treated as 0; ``None`` means any
      language.
    - Only public documents are returned (the search runs as the anonymous visitor).
    - Any backend failure yields ``[]``.
    - Results are best first, at most ``limit`` long, one per URL.
    """

    def search(
        self, query: str, limit: int, language_id: int | None = None
    ) -> list[KeywordHit]: ...

    def is_available(self) -> bool: ...


@runtime_checkable
class SearchBackend(Protocol):
    """One retrieval engine behind the facade (internal seam).

    ``priority`` orders the cascade (higher first). Priority 0 is reserved for the
    always-available database fallback; index-backed engines use priority > 0.
    ``search`` receives an already-clamped query, must honour ``access`` (public-only
    today), ``query.language_id`` and ``query.filters`` (inside the search, before the
    top ``limit``), and may raise: the cascade contains failures.
    ``is_available`` is cheap and never raises.
    """

    @property
    def name(self) -> str: ...

    @property
    def priority(self) -> int: ...

    def is_available(self) -> bool: ...

    def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]: ...


@runtime_checkable
class ExcerptTerms(Protocol):
    """A backend that can name the words its excerpts anchor on (internal seam): the
    engine cuts excerpts for passages no keyword hit carried (dense-only hits, the hybrid
    arm's id-only hits) with them, so every excerpt is cut by one rule."""

    def excerpt_terms(self, text: str, language_id: int | None) -> list[str]: ...


@runtime_checkable
class TermStatisticsSource(Protocol):
    """A backend that can report its collection statistics for a query's terms
    (internal seam): a sharded corpus sums them over its shards and searches every shard
    with the sum (``RetrievalQuery.statistics``)."""

    def term_statistics(self, text: str, language_id: int | None) -> TermStatistics: ...
