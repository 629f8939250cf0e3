"""Precomputed vectors name their model; another model's vectors are refused."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from engine import CorpusConfig, Document, InvalidArgument, SearchEngine
from engine.write.vector_model import same_model
from tests.support.fakes import SwitchableEmbedder

DOCS = [Document(id=f"v{i}", title=f"title {i}", text=f"text number {i}") for i in range(3)]


def _vectors() -> np.ndarray:
    rng = np.random.default_rng(7)
    return rng.standard_normal((3, 64)).astype(np.float32)


def test_vectors_from_another_model_are_refused_and_nothing_is_stored(
    fast_engine: SearchEngine,
) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="vm"))
    with pytest.raises(InvalidArgument, match="nomic-embed-text"):
        corpus.add(DOCS, embeddings=_vectors(), embedding_model="nomic-embed-text")
    assert len(corpus) == 0


@pytest.mark.parametrize(
    "model", ["hash-embedder", "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"]
)
def test_the_corpus_model_by_any_of_its_names_is_accepted(
    fast_engine: SearchEngine, model: str
) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="vm"))
    result = corpus.add(DOCS, embeddings=_vectors(), embedding_model=model)
    assert result.added == 3
    assert corpus.stats()["vectors"] == 3


def test_a_model_name_without_vectors_is_an_argument_error(fast_engine: SearchEngine) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="vm"))
    with pytest.raises(InvalidArgument, match="none were given"):
        corpus.add(DOCS, embedding_model="hash-embedder")
    with pytest.raises(InvalidArgument, match="non-empty"):
        corpus.add(DOCS, embeddings=_vectors(), embedding_model="")


def test_model_aliases() -> None:
    assert same_model("sentence-transformers/all-MiniLM-L6-v2", "all-MiniLM-L6-v2")
    assert not same_model("all-MiniLM-L6-v2", "all-MiniLM-L12-v2")


def test_vectors_of_another_length_are_refused_and_nothing_is_stored(
    fast_engine: SearchEngine,
) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="vm"))
    corpus.add(DOCS[:1], embeddings=_vectors()[:1])
    short = np.ones((2, 10), dtype=np.float32)
    with pytest.raises(InvalidArgument, match="dimension 10"):
        corpus.add(DOCS[1:], embeddings=short)
    assert len(corpus) == 1
    assert corpus.stats()["vectors"] == 1


def test_an_empty_corpus_checks_supplied_vectors_against_its_model(
    fast_engine: SearchEngine,
) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="vm"))  # hash embedder: 64
    with pytest.raises(InvalidArgument, match="dimension 64"):
        corpus.add(DOCS, embeddings=np.ones((3, 10), dtype=np.float32))
    assert len(corpus) == 0
    assert corpus.add(DOCS).degraded == 0  # the model's own vectors still fit


def test_a_stored_vector_of_another_length_does_not_stop_the_corpus_opening(
    tmp_path: Path, hash_embedder: SwitchableEmbedder
) -> None:
    """A store written before adds checked lengths: the odd vector is left out of
    vector search; the corpus opens and every document stays keyword-searchable."""
    with SearchEngine(tmp_path / "e", embedder_factory=lambda spec: hash_embedder) as engine:
        engine.create_corpus(CorpusConfig(name="vm")).add(DOCS, embeddings=_vectors())
    store = tmp_path / "e" / "corpora" / "vm" / "store.sqlite3"
    with sqlite3.connect(store) as db:
        odd = np.ones(10, dtype=np.float32).tobytes()
        db.execute("UPDATE documents SET embedding = ? WHERE source_id = 'v1'", (odd,))
    # Without the saved index file the vector index is rebuilt from the store.
    (tmp_path / "e" / "corpora" / "vm" / "vectors.faiss").unlink(missing_ok=True)
    with SearchEngine(tmp_path / "e", embedder_factory=lambda spec: hash_embedder) as engine:
        corpus = engine.corpus("vm")
        assert corpus.stats()["vectors"] == 2
        assert "v1" in {hit.source_id for hit in corpus.search("text number 1")}


def test_a_supplied_vector_too_long_for_float32_arithmetic_keeps_its_direction(
    fast_engine: SearchEngine,
) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="vm"))
    big = np.zeros((1, 64), dtype=np.float32)
    big[0, 0], big[0, 1] = 3e19, 1.0
    assert corpus.add(DOCS[:1], embeddings=big).added == 1
    stored = corpus._store.get_many(["v0"], public_only=False)["v0"].embedding
    assert stored is not None and abs(float(np.linalg.norm(stored)) - 1.0) < 1e-6
