"""Policy: the public surface of ``sparse`` changes only by a deliberate edit here."""

from __future__ import annotations

import subprocess
import sys

import sparse

EXPECTED_ALL = [
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


def test_all_is_pinned() -> None:
    assert sparse.__all__ == EXPECTED_ALL


def test_every_name_resolves() -> None:
    for name in sparse.__all__:
        assert getattr(sparse, name) is not None


def test_contract_values() -> None:
    assert sparse.MAX_QUERY_LENGTH == 4_096
    assert sparse.MIN_QUERY_LENGTH == 2
    assert sparse.MAX_SOURCES >= 200
    assert sparse.MAX_EXCERPT_LENGTH == 300
    fields = [f for f in sparse.KeywordHit.__dataclass_fields__]
    assert fields == ["source_id", "title", "url", "excerpt", "language_id", "score", "page_uid"]


def test_both_registrations_have_stable_names() -> None:
    assert callable(sparse.KeywordSearchFacade.full_cascade)
    assert callable(sparse.KeywordSearchFacade.index_backed)
    assert sparse.KeywordSearchFacade.index_backed([]).index_backed_only is True


def test_errors_share_one_root() -> None:
    assert issubclass(sparse.SparseIndexCorruptError, sparse.SparseError)
    assert issubclass(sparse.SparseIndexLockedError, sparse.SparseError)


def test_importing_sparse_does_not_load_torch() -> None:
    probe = "import sys, sparse; sys.exit(1 if 'torch' in sys.modules else 0)"
    done = subprocess.run([sys.executable, "-c", probe], check=False, timeout=300)
    assert done.returncode == 0
