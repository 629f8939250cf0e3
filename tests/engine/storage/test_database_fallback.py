"""The priority-0 database LIKE fallback honours the SearchBackend contract."""

from __future__ import annotations

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
