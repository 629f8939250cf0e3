"""The keyword-search facade: the one public entry point of ``sparse``.

``KeywordSearchFacade`` implements ``KeywordSearch``. It clamps every input (see
``sparse.clamp``), searches as the anonymous visitor (``AccessContext.public_only()``),
delegates to a ``RetrievalService`` and turns any failure into ``[]``.

One class, two registrations:

- ``KeywordSearchFacade.full_cascade(backends)``: every backend, including the priority-0
  database fallback. The default for "find the page about X".
- ``KeywordSearchFacade.index_backed(backends)``: priority-0 backends excluded; its
  ``is_available()`` answers for the index-backed engines only. The hybrid sparse arm
  binds to this one, so LIKE hits are never fused with BM25 ranks.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

from sparse.cascade import RetrievalService
from sparse.clamp import clamp_language, clamp_limit, clamp_text
from sparse.contracts import (
    MAX_SOURCES,
    AccessContext,
    EvidenceSource,
    FieldFilter,
    KeywordHit,
    RangeFilter,
    RetrievalQuery,
    SearchBackend,
    TermsFilter,
    TermStatistics,
)
from sparse.errors import frames_of, is_contained

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

_MAX_FILTERS = 256
"""More conditions than this answer ``[]`` (the engine caps its filters far lower)."""


class KeywordSearchFacade:
    """Keyword search over a cascade of backends; never raises (see ``KeywordSearch``)."""

    def __init__(self, backends: Iterable[SearchBackend], *, index_backed_only: bool = False):
        chosen = [b for b in backends if not index_backed_only or b.priority > 0]
        self._index_backed_only = index_backed_only
        self._service = RetrievalService(chosen)

    @classmethod
    def full_cascade(cls, backends: Iterable[SearchBackend]) -> KeywordSearchFacade:
        """The registration for keyword search: every backend, fallback included."""
        return cls(backends, index_backed_only=False)

    @classmethod
    def index_backed(cls, backends: Iterable[SearchBackend]) -> KeywordSearchFacade:
        """The registration for the hybrid sparse arm: index-backed engines only."""
        return cls(backends, index_backed_only=True)

    @property
    def index_backed_only(self) -> bool:
        return self._index_backed_only

    @property
    def backend_names(self) -> tuple[str, ...]:
        """Names of the backends this facade consults, highest priority first."""
        return tuple(backend.name for backend in self._service.backends)

    def is_available(self) -> bool:
        """True when some backend of this registration can answer. Never raises."""
        try:
            return self._service.is_available()
        except BaseException as exc:
            if not is_contained(exc):
                raise
            logger.warning("keyword availability check failed (%s)", type(exc).__name__)
            logger.debug("availability check traceback:\n%s", frames_of(exc))
            return False

    def search(
        self,
        query: str,
        limit: int,
        language_id: int | None = None,
        *,
        filters: Iterable[FieldFilter] = (),
        excerpts: bool = True,
        within: Iterable[str] | None = None,
        statistics: TermStatistics | None = None,
        distinct_urls: bool = True,
    ) -> list[KeywordHit]:
        """Best-first public hits for ``query``; ``[]`` on short queries or any failure.

        Keyword-only extensions of the ``KeywordSearch`` contract: ``filters`` are AND-ed
        conditions on declared fields, applied inside the backend before the top
        ``limit``; ``excerpts=False`` returns hits with an empty ``excerpt`` (a caller
        that only fuses ranked ids — the hybrid arm — skips the cost of cutting them);
        ``within`` restricts the hits to those source ids (at most ``MAX_SOURCES``
        strings; more, or a non-string, answers ``[]``); ``statistics`` scores every term
        with those collection statistics instead of the index's own (what
        ``term_statistics`` of several indexes, combined, gives: one shard of a corpus
        ranking as the whole corpus would); ``distinct_urls=False`` keeps every document
        although several share a URL (by default only the best hit per URL is kept, and
        a page is filled from further down the ranking).
        """
        try:
            text = clamp_text(query)
            # Read at most one past each cap: an endless or huge iterable is refused, not
            # consumed (a str would read as its characters: refused too).
            conditions = tuple(itertools.islice(filters, _MAX_FILTERS + 1))
            if (
                text is None
                or len(conditions) > _MAX_FILTERS
                or not all(isinstance(c, TermsFilter | RangeFilter) for c in conditions)
            ):
                return []
            eligible = None
            if within is not None:
                if isinstance(within, str):
                    return []
                listed = list(itertools.islice(within, MAX_SOURCES + 1))
                eligible = frozenset(listed)
                if len(listed) > MAX_SOURCES or not all(isinstance(i, str) for i in eligible):
                    return []
            if statistics is not None and not isinstance(statistics, TermStatistics):
                return []
            request = RetrievalQuery(
                text=text,
                limit=clamp_limit(limit),
                language_id=clamp_language(language_id),
                filters=conditions,
                excerpts=bool(excerpts),
                within=eligible,
                statistics=statistics,
                distinct_urls=bool(distinct_urls),
            )
            result = self._service.retrieve(request, AccessContext.public_only())
            return [_to_hit(source) for source in result.sources[: request.limit]]
        except BaseException as exc:  # the facade boundary: never an exception out
            if not is_contained(exc):
                raise
            logger.warning("keyword search failed (%s); answering []", type(exc).__name__)
            logger.debug("keyword search traceback:\n%s", frames_of(exc))
            return []

    def excerpt_terms(self, query: str, language_id: int | None = None) -> list[str]:
        """The lowercase word forms the hits of a search for ``query`` get their excerpts
        anchored on, best anchor first (``sparse.excerpt.make_excerpt`` with them cuts the
        same excerpt from a document's text); ``[]`` on short queries, when the answering
        backend cannot say, or on any failure. A keyword-only extension, like ``within``."""
        terms: list[str] = self._ask(
            "excerpt terms", query, language_id, self._service.excerpt_terms, []
        )
        return terms

    def term_statistics(self, query: str, language_id: int | None = None) -> TermStatistics | None:
        """The answering backend's collection statistics for the terms of ``query``
        (``TermStatistics``: documents, and each term's document frequency), to be
        combined with other indexes' and passed back as ``search(statistics=...)``;
        ``None`` on short queries, when that backend cannot say, or on any failure."""
        statistics: TermStatistics | None = self._ask(
            "term statistics", query, language_id, self._service.term_statistics, None
        )
        return statistics

    def _ask(
        self,
        what: str,
        query: str,
        language_id: int | None,
        ask: Callable[[str, int | None], _T],
        cannot: _T,
    ) -> _T:
        """``ask`` the service about the clamped query; ``cannot`` on a short query or any
        failure (the facade boundary: never an exception out, never the query logged)."""
        try:
            text = clamp_text(query)
            if text is None:
                return cannot
            return ask(text, clamp_language(language_id))
        except BaseException as exc:
            if not is_contained(exc):
                raise
            logger.warning("%s failed (%s)", what, type(exc).__name__)
            logger.debug("%s traceback:\n%s", what, frames_of(exc))
            return cannot


def _to_hit(source: EvidenceSource) -> KeywordHit:
    return KeywordHit(
        source_id=source.source_id,
        title=source.title,
        url=source.url,
        excerpt=source.excerpt,
        language_id=source.language_id,
        score=source.score,
        page_uid=source.page_uid,
    )
