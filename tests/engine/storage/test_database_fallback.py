"""The priority-0 database LIKE fallback honours the SearchBackend contract."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from pathlib import Path

import pytest

from engine import Document
from engine.storage import DocumentStore, EmbeddingStatus, StoredDocument
from engine.storage.like_backend import DatabaseLikeBackend
from engine.write.ingest import content_hash
from sparse import RetrievalQuery, SearchBackend, SparseDocument
from tests.sparse.backend_contract import PUBLIC, BackendFactory, SearchBackendContract


def _stored(doc: SparseDocument) -> StoredDocument:
    return StoredDocument(
        source_id=doc.source_id,
        title=doc.title,
        text=doc.text,
        url=doc.url,
        language_id=doc.language_id,
        access_groups=frozenset() if doc.public else frozenset({"staff"}),
        page_uid=doc.page_uid,
        content_hash=content_hash(Document(id=doc.source_id, title=doc.title, text=doc.text)),
        embedding_status=EmbeddingStatus.NOT_REQUIRED,
    )


class TestDatabaseLikeBackend(SearchBackendContract):
    @pytest.fixture
    def make_backend(self, tmp_path: Path) -> BackendFactory:
        counter = iter(range(1_000_000))

        def build(docs: Sequence[SparseDocument]) -> SearchBackend:
            store = DocumentStore(tmp_path / f"store-{next(counter)}.sqlite3")
            store.upsert([_stored(d) for d in docs], None)
            return DatabaseLikeBackend(store)

        return build

    def test_priority_zero(self, make_backend: BackendFactory) -> None:
        backend = make_backend([])
        assert backend.priority == 0 and backend.is_available()


def test_ranking_ids_only_reads_no_text(tmp_path: Path) -> None:
    """A caller that ranks ids (the hybrid arm, a deep page) is not sent every hit's text."""
    store = DocumentStore(tmp_path / "ids.sqlite3")
    docs = [SparseDocument(f"d{i}", f"Volcano {i}", "Lava. " * (i + 1)) for i in range(5)]
    store.upsert([_stored(d) for d in docs], None)
    backend = DatabaseLikeBackend(store)
    full = backend.search(RetrievalQuery(text="lava", limit=5), PUBLIC)
    bare = backend.search(RetrievalQuery(text="lava", limit=5, excerpts=False), PUBLIC)
    assert [(h.source_id, h.score) for h in bare] == [(h.source_id, h.score) for h in full]
    assert all(h.excerpt for h in full) and not any(h.excerpt for h in bare)


def test_equal_scores_are_ordered_by_id_whatever_the_insertion_order(tmp_path: Path) -> None:
    """Regression: equal LIKE scores (small integers: ties are the rule) followed the
    insertion order, so two builds of one corpus answered differently."""
    docs = [SparseDocument(f"d{i}", "", "lava flows") for i in range(6)]
    orders = []
    for name, batch in (("forward", docs), ("backward", docs[::-1])):
        store = DocumentStore(tmp_path / f"{name}.sqlite3")
        store.upsert([_stored(d) for d in batch], None)
        found = DatabaseLikeBackend(store).search(RetrievalQuery(text="lava", limit=6), PUBLIC)
        orders.append([h.source_id for h in found])
    assert orders[0] == orders[1] == [f"d{i}" for i in range(6)]


def _backend(path: Path, docs: Sequence[SparseDocument]) -> DatabaseLikeBackend:
    store = DocumentStore(path)
    store.upsert([_stored(d) for d in docs], None)
    return DatabaseLikeBackend(store)


def _found(backend: DatabaseLikeBackend, text: str) -> list[str]:
    return [h.source_id for h in backend.search(RetrievalQuery(text=text, limit=10), PUBLIC)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Москва", ["ru"]),
        ("МОСКВА", ["ru"]),
        ("столица", ["ru"]),
        ("École", ["fr"]),
        ("ÉLÈVES", ["fr"]),
        ("élèves", ["fr"]),
        ("Αθήνα", ["gr"]),
        ("πρωτεύουσα", ["gr"]),
        ("οδυσσεας", ["gr"]),  # a final sigma and its capital
        ("Straße", ["de"]),
    ],
)
def test_words_outside_ascii_match_whatever_their_case(
    tmp_path: Path, query: str, expected: list[str]
) -> None:
    """Regression: the fallback lower-cased the query and SQLite's LIKE folds ASCII case
    only, so a capitalised non-ASCII word, even typed exactly, found nothing (the index
    finds it: it lower-cases both sides)."""
    backend = _backend(
        tmp_path / "case.sqlite3",
        [
            SparseDocument("ru", "Москва", "Москва — СТОЛИЦА России."),
            SparseDocument("fr", "École normale", "ÉLÈVES de l'École."),
            SparseDocument("gr", "Αθήνα", "Η ΑΘΗΝΑ είναι ΠΡΩΤΕΎΟΥΣΑ. Ο ΟΔΥΣΣΕΑΣ."),
            SparseDocument("de", "STRASSE", "Die STRAẞE ist lang."),
            SparseDocument("en", "Moscow", "Moscow is the capital of Russia."),
        ],
    )
    assert _found(backend, query) == expected


def test_a_title_match_outside_ascii_still_counts_double(tmp_path: Path) -> None:
    backend = _backend(
        tmp_path / "title.sqlite3",
        [
            SparseDocument("body", "Elsewhere", "Über alles: москва."),
            SparseDocument("title", "МОСКВА", "A city."),
        ],
    )
    found = backend.search(RetrievalQuery(text="Москва", limit=10), PUBLIC)
    assert [(h.source_id, h.score) for h in found] == [("title", 2.0), ("body", 1.0)]


def test_words_with_accents_match_composed_or_decomposed(tmp_path: Path) -> None:
    """Regression: a query typed with combining accents (macOS, some PDF extractions) was
    split into "nie", "me", "re", which matched "Reset your password"; the index reads
    both spellings as one word (NFC), and so does the fallback now, on either side."""
    decomposed = unicodedata.normalize("NFD", "Ménière")
    backend = _backend(
        tmp_path / "nfd.sqlite3",
        [
            SparseDocument("a", "Reset your password", "Use the reset link."),
            SparseDocument("c", "Ménière disease", "Ménière's disease affects the inner ear."),
            SparseDocument("d", "Vertigo", f"{decomposed.upper()} described it in 1861."),
        ],
    )
    assert _found(backend, decomposed) == ["c", "d"]
    assert _found(backend, "MÉNIÈRE") == ["c", "d"]
