"""The keyword-search facade and the retrieval cascade behind it.

``KeywordSearch`` / ``KeywordHit`` and the limits are the public contract; the engine
binds ``KeywordSearchFacade.full_cascade`` to keyword search and
``KeywordSearchFacade.index_backed`` to the hybrid sparse arm.
"""

from sparse.analyzers import DEFAULT_LANGUAGE_ANALYZERS, Analyzer, LanguageAnalyzers
from sparse.cascade import RetrievalService
from sparse.contracts import (
    DEFAULT_TITLE_WEIGHT,
    MAX_EXCERPT_LENGTH,
    MAX_QUERY_LENGTH,
    MAX_SOURCES,
    MAX_TITLE_WEIGHT,
    MIN_QUERY_LENGTH,
    AccessContext,
    EvidenceSource,
    ExcerptTerms,
    FieldFilter,
    FieldKind,
    KeywordHit,
    KeywordSearch,
    RangeFilter,
    RetrievalQuery,
    RetrievalResult,
    SearchBackend,
    SparseDocument,
    TermsFilter,
    TermStatistics,
    TermStatisticsSource,
)
from sparse.errors import SparseError, SparseIndexCorruptError, SparseIndexLockedError
from sparse.facade import KeywordSearchFacade
from sparse.tantivy_backend import StoredBody, TantivyBackend
from sparse.tantivy_index import TantivyIndex

__all__ = [
    "DEFAULT_LANGUAGE_ANALYZERS",
    "DEFAULT_TITLE_WEIGHT",
    "MAX_EXCERPT_LENGTH",
    "MAX_QUERY_LENGTH",
    "MAX_SOURCES",
    "MAX_TITLE_WEIGHT",
    "MIN_QUERY_LENGTH",
    "AccessContext",
    "Analyzer",
    "EvidenceSource",
    "ExcerptTerms",
    "FieldFilter",
    "FieldKind",
    "KeywordHit",
    "KeywordSearch",
    "KeywordSearchFacade",
    "LanguageAnalyzers",
    "RangeFilter",
    "RetrievalQuery",
    "RetrievalResult",
    "RetrievalService",
    "SearchBackend",
    "SparseDocument",
    "SparseError",
    "SparseIndexCorruptError",
    "SparseIndexLockedError",
    "StoredBody",
    "TantivyBackend",
    "TantivyIndex",
    "TermStatistics",
    "TermStatisticsSource",
    "TermsFilter",
]
