"""Derived indexes follow the store: catch-up after lag, rebuild after damage."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine import CorpusConfig, Document, SearchEngine
from tests.support.fakes import SwitchableEmbedder

DOCS = [Document(id=f"d{i}", title=f"Topic {i}", text=f"alpha{i} shared words") for i in range(30)]


def _open(path: Path, embedder: SwitchableEmbedder) -> SearchEngine:
    return SearchEngine(path, embedder_factory=lambda spec: embedder)


def test_markers_lagging_behind_the_store_are_caught_up(
    tmp_path: Path, hash_embedder: SwitchableEmbedder
) -> None:
    with _open(tmp_path, hash_embedder) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c"))
        corpus.add(DOCS[:10])
        corpus.flush()
        directory = tmp_path / "corpora" / "c"
        tantivy_marker = (directory / "tantivy.seq").read_text()
        vectors_marker = (directory / "vectors.seq").read_text()
        saved_tantivy = tmp_path / "tantivy-copy"
        shutil.copytree(directory / "tantivy", saved_tantivy)
        shutil.copy(directory / "vectors.faiss", tmp_path / "vectors-copy")
        corpus.add(DOCS[10:])
        corpus.delete(["d0"])
    # Simulate a crash after the store committed but before the indexes did.
    shutil.rmtree(directory / "tantivy")
    shutil.copytree(saved_tantivy, directory / "tantivy")
    shutil.copy(tmp_path / "vectors-copy", directory / "vectors.faiss")
    (directory / "tantivy.seq").write_text(tantivy_marker)
    (directory / "vectors.seq").write_text(vectors_marker)
    with _open(tmp_path, hash_embedder) as eng:
        corpus = eng.corpus("c")
        assert corpus.search("alpha25")[0].source_id == "d25"
        assert all(h.source_id != "d0" for h in corpus.search("alpha0 shared", top_k=50))
        assert corpus.stats()["vectors"] == 29


def test_damaged_indexes_are_rebuilt_without_re_embedding(
    tmp_path: Path, hash_embedder: SwitchableEmbedder
) -> None:
    with _open(tmp_path, hash_embedder) as eng:
        eng.create_corpus(CorpusConfig(name="c")).add(DOCS)
    directory = tmp_path / "corpora" / "c"
    shutil.rmtree(directory / "tantivy")
    (directory / "vectors.faiss").write_bytes(b"garbage")
    calls = hash_embedder.embed_calls
    with _open(tmp_path, hash_embedder) as eng:
        corpus = eng.corpus("c")
        assert corpus.stats()["vectors"] == 30
        assert hash_embedder.embed_calls == calls  # rebuilt from stored vectors
        hit = corpus.search("alpha7")[0]
        assert (hit.source_id, hit.ranks.sparse) == ("d7", 1)
