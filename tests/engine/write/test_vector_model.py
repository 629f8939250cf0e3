"""Precomputed vectors name their model; another model's vectors are refused."""

from __future__ import annotations

import numpy as np
import pytest

from engine import CorpusConfig, Document, InvalidArgument, SearchEngine
from engine.write.vector_model import same_model

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
