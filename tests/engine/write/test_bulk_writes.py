"""Bulk adds commit the keyword index once per ``_KEYWORD_BATCH`` documents instead of once
per store chunk, and what the store committed is indexed even when the add fails."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

import engine.write.keyword_keeper
from engine import CorpusConfig, Document, SearchEngine, StorageError
from engine.storage import DocumentStore, StoredDocument
from sparse import SparseDocument, TantivyIndex

N_DOCS = 1_300  # three store chunks of 512


def _docs(n: int = N_DOCS) -> list[Document]:
    return [Document(id=f"d{i}", title=f"Item {i}", text=f"marker{i} shared") for i in range(n)]


@pytest.fixture
def upsert_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    sizes: list[int] = []
    real = TantivyIndex.upsert

    def counting(self: TantivyIndex, docs: Sequence[SparseDocument]) -> None:
        sizes.append(len(docs))
        real(self, docs)

    monkeypatch.setattr(TantivyIndex, "upsert", counting)
    return sizes


def test_one_add_is_one_keyword_commit(tmp_path: Path, upsert_sizes: list[int]) -> None:
    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder=None))
        corpus.add(_docs())
        assert upsert_sizes == [N_DOCS]
        assert corpus.search("marker1299")[0].source_id == "d1299"
        corpus.add(_docs(3))  # a later add commits its own documents
        assert upsert_sizes == [N_DOCS, 3]


def test_large_adds_commit_every_batch(
    tmp_path: Path, upsert_sizes: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine.write.keyword_keeper, "_KEYWORD_BATCH", 600)
    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder=None))
        corpus.add(_docs())
        assert upsert_sizes == [1_024, N_DOCS - 1_024]
        assert corpus.stats()["documents"] == N_DOCS


def test_a_failing_add_still_indexes_what_the_store_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = DocumentStore.upsert
    calls = {"n": 0}

    def failing_third(
        self: DocumentStore, docs: Sequence[StoredDocument], model: str | None
    ) -> tuple[int, int]:
        calls["n"] += 1
        if calls["n"] == 3:
            raise StorageError("disk full (injected)")
        return real(self, docs, model)

    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder=None))
        monkeypatch.setattr(DocumentStore, "upsert", failing_third)
        with pytest.raises(StorageError):
            corpus.add(_docs())
        monkeypatch.undo()
        assert corpus.search("marker1023")[0].source_id == "d1023"  # chunk 2: indexed
        assert corpus.search("marker1024") == []  # chunk 3: never stored
        assert corpus.stats()["documents"] == 1_024


@pytest.mark.parametrize("batch", [600, 20_000], ids=["mid-add batch", "final batch"])
def test_an_add_interrupted_in_its_keyword_commit_answers_from_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """Review: Ctrl-C while an add committed its keyword batch (how a notebook stops a
    long add) dropped the batch from the index without marking it behind: the corpus
    answered [] for documents it had stored, until the next write or a reopen."""
    monkeypatch.setattr(engine.write.keyword_keeper, "_KEYWORD_BATCH", batch)
    real = TantivyIndex.upsert

    def interrupted(self: TantivyIndex, docs: Sequence[SparseDocument]) -> None:
        raise KeyboardInterrupt

    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder=None))
        monkeypatch.setattr(TantivyIndex, "upsert", interrupted)
        with pytest.raises(KeyboardInterrupt):
            corpus.add(_docs())
        monkeypatch.setattr(TantivyIndex, "upsert", real)
        stored = corpus.stats()["documents"]
        assert stored >= 1_024
        assert corpus.search("marker1000")[0].source_id == "d1000"  # from the database
        corpus.add([Document(id="later", text="an unrelated write")])  # catches up
        assert corpus._indexes.keyword_index_current
        assert corpus._indexes.tantivy.doc_count() == stored + 1
        assert corpus.search("marker1000")[0].source_id == "d1000"
