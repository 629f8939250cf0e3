"""A keyword backend that steps aside while its index is known to be behind the store.

After a failed index write the tantivy index still opens and answers, but it lacks
documents that ``add`` already acknowledged. Reporting it unavailable until it has caught
up lets the full cascade answer from the database fallback (which sees everything) and
turns the hybrid arm into an empty sparse arm — never a silently incomplete answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from engine.search.gate import suspended
from sparse import (
    AccessContext,
    EvidenceSource,
    ExcerptTerms,
    RetrievalQuery,
    SearchBackend,
    SparseIndexCorruptError,
    TermStatistics,
    TermStatisticsSource,
)


class _Delegating:
    """A backend that answers through ``inner``, under its name and priority."""

    def __init__(self, inner: SearchBackend) -> None:
        self._inner = inner

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def priority(self) -> int:
        return self._inner.priority


class CurrentIndexBackend(_Delegating):
    """Delegates to ``inner``; unavailable whenever ``is_current()`` is False.

    ``gate`` (the engine's search gate) is held around the index search only: that is
    CPU-bound Python over a short native call, while the database fallback's scans, which
    release the interpreter, stay outside it.
    """

    def __init__(
        self,
        inner: SearchBackend,
        is_current: Callable[[], bool],
        gate: contextlib.AbstractContextManager[None] | None = None,
        on_unreadable: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(inner)
        self._is_current = is_current
        self._gate = gate if gate is not None else contextlib.nullcontext()
        self._on_unreadable = on_unreadable

    def is_available(self) -> bool:
        return self._is_current() and self._inner.is_available()

    def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
        with self._gate:
            try:
                return self._inner.search(query, access)
            except SparseIndexCorruptError:
                # A damaged segment fails every search that reads it, while the index
                # opens and counts right: flagged, the cascade stops asking it, and the
                # next writer rebuilds it (before, a warning per search, for good).
                self._on_unreadable()
                raise

    def excerpt_terms(self, text: str, language_id: int | None) -> list[str]:
        if not isinstance(self._inner, ExcerptTerms):
            return []
        with self._gate:
            return self._inner.excerpt_terms(text, language_id)

    def term_statistics(self, text: str, language_id: int | None) -> TermStatistics:
        if not isinstance(self._inner, TermStatisticsSource):
            return TermStatistics(0)  # an index that cannot say adds nothing to a sum
        with self._gate:
            return self._inner.term_statistics(text, language_id)


class GateFreeBackend(_Delegating):
    """Delegates to ``inner`` outside the search gate: the database fallback's scans
    release the interpreter for their whole length and must not hold up other searches,
    even when the search that runs them holds the gate (a keyword search does)."""

    def __init__(self, inner: SearchBackend, gate: contextlib.AbstractContextManager[None]) -> None:
        super().__init__(inner)
        self._gate = gate

    def is_available(self) -> bool:
        return self._inner.is_available()

    def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
        with suspended(self._gate):
            return self._inner.search(query, access)
