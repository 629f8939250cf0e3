"""The keyword-search contract: the facade protocol, its DTOs and its limits.

Everything in this module is part of the public contract of ``sparse``: the engine, the
benchmark and users rely on these names and semantics. The internals behind the facade
(backends, the cascade) live in sibling modules and may change freely.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

MAX_QUERY_LENGTH = 1_000
"""Queries are trimmed and then truncated to this many characters (never rejected)."""

MIN_QUERY_LENGTH = 2
"""A trimmed query shorter than this returns ``[]``."""

MAX_SOURCES = 500
"""``limit`` is clamped to ``1..MAX_SOURCES``; large enough for a fusion window of 100-200."""

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
    """An already-clamped query as backends receive it."""

    text: str
    limit: int
    language_id: int | None = None


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
    today) and ``query.language_id``, and may raise: the cascade contains failures.
    ``is_available`` is cheap and never raises.
    """

    @property
    def name(self) -> str: ...

    @property
    def priority(self) -> int: ...

    def is_available(self) -> bool: ...

    def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]: ...
