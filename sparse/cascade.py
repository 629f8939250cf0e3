"""The retrieval cascade: backends in priority order, the first available one answers.

Rules (internal to ``sparse``, free to change without touching the facade contract):

- Backends are tried highest ``priority`` first; ties keep the order they were given in.
- A backend that is unavailable, whose ``is_available()`` raises, or whose ``search``
  raises is skipped and the next one is tried.
- The first available backend that returns without raising answers, even with an empty
  list: an empty answer from a healthy index is the answer ("nothing matches"), not a
  failure, so a lower-priority engine of incomparable relevance is not consulted.
- Scores are never merged or compared across engines: exactly one backend answers.
- Sources are de-duplicated by URL, keeping the first (best) one, unless the query says
  ``distinct_urls=False``; a source with an empty URL has no URL key and is
  de-duplicated by its source id only. What the URL rule drops is made up from further
  down the backend's ranking (it is asked again for more, up to four times the cap).
- At most ``min(query.limit, max_results)`` sources are returned, best first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from sparse.contracts import (
    MAX_SOURCES,
    AccessContext,
    EvidenceSource,
    ExcerptTerms,
    RetrievalQuery,
    RetrievalResult,
    SearchBackend,
    TermStatistics,
    TermStatisticsSource,
)
from sparse.errors import frames_of, is_contained

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class RetrievalService:
    """Runs a query through ``backends`` in priority order; see the module docstring."""

    def __init__(self, backends: Iterable[SearchBackend], max_results: int = MAX_SOURCES) -> None:
        if isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1:
            raise ValueError(f"max_results must be a positive int, got {max_results!r}")
        ordered = sorted(backends, key=lambda backend: -backend.priority)
        self._backends: tuple[SearchBackend, ...] = tuple(ordered)
        self._max_results = max_results

    @property
    def backends(self) -> tuple[SearchBackend, ...]:
        """The backends, highest priority first."""
        return self._backends

    def is_available(self) -> bool:
        """True when at least one backend reports itself available. Never raises."""
        return any(_available(backend) for backend in self._backends)

    def retrieve(self, query: RetrievalQuery, access: AccessContext) -> RetrievalResult:
        """Answer ``query`` from the first available backend that does not raise.

        Returns ``RetrievalResult((), None)`` when no backend could answer.
        """
        cap = max(1, min(query.limit, self._max_results))
        for backend in self._backends:
            if not _available(backend):
                continue
            try:
                sources = _distinct(backend, query, access, cap)
            except BaseException as exc:  # contained: the next backend gets the query
                if not is_contained(exc):
                    raise
                _log_failure(backend, exc)
                continue
            return RetrievalResult(sources=sources, backend=backend.name)
        return RetrievalResult(sources=(), backend=None)

    def excerpt_terms(self, text: str, language_id: int | None) -> list[str]:
        """The words the backend that would answer ``text`` anchors its excerpts on, best
        first (``ExcerptTerms``); ``[]`` when that backend cannot say."""
        return self._ask_answering(
            ExcerptTerms, lambda backend: backend.excerpt_terms(text, language_id), []
        )

    def term_statistics(self, text: str, language_id: int | None) -> TermStatistics | None:
        """The collection statistics of the backend that would answer ``text`` for its
        terms (``TermStatisticsSource``); ``None`` when that backend cannot say."""
        statistics: TermStatistics | None = self._ask_answering(
            TermStatisticsSource, lambda backend: backend.term_statistics(text, language_id), None
        )
        return statistics

    def _ask_answering(self, capability: type, ask: Callable[[Any], _T], cannot: _T) -> _T:
        """``ask`` the backend that would answer a search now — tried in the order
        ``retrieve`` tries them, with the same failure rules — when it has
        ``capability`` (a runtime-checkable protocol); ``cannot`` when it has not, or
        when none is available."""
        for backend in self._backends:
            if not _available(backend):
                continue
            if not isinstance(backend, capability):
                return cannot
            try:
                return ask(backend)
            except BaseException as exc:  # contained, as in ``retrieve``
                if not is_contained(exc):
                    raise
                _log_failure(backend, exc)
        return cannot


def _log_failure(backend: SearchBackend, exc: BaseException) -> None:
    """The exception's type at warning level, its frames at debug: never its message,
    which may quote the query."""
    logger.warning(
        "sparse backend %s failed (%s); trying the next one", backend.name, type(exc).__name__
    )
    logger.debug("sparse backend %s traceback:\n%s", backend.name, frames_of(exc))


def _available(backend: SearchBackend) -> bool:
    try:
        return bool(backend.is_available())
    except BaseException as exc:
        if not is_contained(exc):
            raise
        logger.warning("sparse backend availability check failed (%s)", type(exc).__name__)
        logger.debug("availability check traceback:\n%s", frames_of(exc))
        return False


def _distinct(
    backend: SearchBackend, query: RetrievalQuery, access: AccessContext, cap: int
) -> tuple[EvidenceSource, ...]:
    """Up to ``cap`` of the backend's hits, one per source id (and, with
    ``query.distinct_urls``, per non-empty URL). Hits dropped for a repeated URL are made
    up from further down the ranking — the backend is asked again for up to
    ``_REFILL_FACTOR`` times as many — so a page is not short while more pages wait."""
    fetch = query.limit
    ceiling = cap * _REFILL_FACTOR
    while True:
        asked = query if fetch == query.limit else replace(query, limit=fetch)
        sources = backend.search(asked, access)
        kept = _dedupe(sources, cap, by_url=query.distinct_urls)
        if len(kept) >= cap or len(sources) < fetch or fetch >= ceiling:
            return kept
        fetch = min(fetch * 2, ceiling)


_REFILL_FACTOR = 4


def _dedupe(
    sources: Sequence[EvidenceSource], cap: int, *, by_url: bool
) -> tuple[EvidenceSource, ...]:
    seen_urls: set[str] = set()
    seen_ids: set[str] = set()
    kept: list[EvidenceSource] = []
    for source in sources:
        if source.source_id in seen_ids or (by_url and source.url and source.url in seen_urls):
            continue
        seen_ids.add(source.source_id)
        if source.url:
            seen_urls.add(source.url)
        kept.append(source)
        if len(kept) >= cap:
            break
    return tuple(kept)
