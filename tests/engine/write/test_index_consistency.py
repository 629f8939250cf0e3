"""Derived indexes follow the store: catch-up after lag, rebuild after damage."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from dense import Embedder, FaissIndex
from engine import Corpus, CorpusConfig, Document, SearchEngine
from engine.config import EmbedderSpec, SentenceTransformerEmbedding
from engine.write.keyword_keeper import KeywordIndexKeeper
from sparse import SparseDocument
from tests.support.fakes import HashEmbedder, SwitchableEmbedder

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


def test_a_vector_file_of_another_dimension_is_rebuilt_from_the_store(
    tmp_path: Path, hash_embedder: SwitchableEmbedder
) -> None:
    """A valid file holding as many vectors of another length (copied from another
    corpus, or left by a model switch that did not finish) is not this corpus's index:
    kept, every query would be the wrong length and the vector arm silently off."""
    with _open(tmp_path, hash_embedder) as eng:
        eng.create_corpus(CorpusConfig(name="c")).add(DOCS)
    foreign = FaissIndex(16)
    rng = np.random.default_rng(0)
    foreign.add([doc.id for doc in DOCS], rng.standard_normal((30, 16)).astype(np.float32))
    foreign.save(tmp_path / "corpora" / "c" / "vectors.faiss")
    calls = hash_embedder.embed_calls
    with _open(tmp_path, hash_embedder) as eng:
        corpus = eng.corpus("c")
        hit = corpus.search("alpha7 shared")[0]
        assert (hit.source_id, hit.ranks.dense) == ("d7", 1)
        assert hash_embedder.embed_calls == calls + 1  # the query only: no re-embedding
    reopened = FaissIndex.load(tmp_path / "corpora" / "c" / "vectors.faiss")
    assert (reopened.dimension, len(reopened)) == (HashEmbedder().dimension, 30)
    reopened.close()


@pytest.mark.parametrize("with_marker", [False, True])
def test_a_vector_file_from_another_corpus_holding_as_many_vectors_is_not_taken(
    tmp_path: Path, hash_embedder: SwitchableEmbedder, with_marker: bool
) -> None:
    """Review: a ``vectors.faiss`` copied from another corpus with the same number and
    length of vectors passed every check, and the vector arm answered with the other
    corpus's documents (the store check then dropped them all). The file names its
    store now; another store's is rebuilt from this one's stored vectors."""
    others = [Document(id=f"e{i}", text=f"beta{i} other words") for i in range(len(DOCS))]
    with _open(tmp_path, hash_embedder) as eng:
        eng.create_corpus(CorpusConfig(name="a")).add(DOCS)
        eng.create_corpus(CorpusConfig(name="b")).add(others)
    corpora = tmp_path / "corpora"
    shutil.copy(corpora / "a" / "vectors.faiss", corpora / "b" / "vectors.faiss")
    if with_marker:
        shutil.copy(corpora / "a" / "vectors.seq", corpora / "b" / "vectors.seq")
    calls = hash_embedder.embed_calls
    with _open(tmp_path, hash_embedder) as eng:
        corpus = eng.corpus("b")
        hit = corpus.search("beta7 other")[0]
        assert (hit.source_id, hit.ranks.dense) == ("e7", 1)
        assert hash_embedder.embed_calls == calls + 1  # the query only: no re-embedding
    origins = []
    for name in ("a", "b"):
        reopened = FaissIndex.load(corpora / name / "vectors.faiss")
        origins.append(reopened.origin)
        reopened.close()
    assert all(origins) and origins[0] != origins[1]  # rebuilt and saved as b's


def test_a_process_that_follows_does_not_take_another_corpus_vector_file(
    tmp_path: Path, hash_embedder: SwitchableEmbedder
) -> None:
    """The same check where a process opens the corpus while another holds its write lock
    (it loads the file and follows the store, writing nothing): another store's file is
    not served; the stored vectors are loaded instead."""
    others = [Document(id=f"e{i}", text=f"beta{i} other words") for i in range(len(DOCS))]
    with _open(tmp_path, hash_embedder) as eng:
        eng.create_corpus(CorpusConfig(name="a")).add(DOCS)
        eng.create_corpus(CorpusConfig(name="b")).add(others)
    corpora = tmp_path / "corpora"
    with _open(tmp_path, hash_embedder) as holder:
        writing = holder.corpus("b")
        with writing._sync.writing():  # held: the next open of "b" follows
            shutil.copy(corpora / "a" / "vectors.faiss", corpora / "b" / "vectors.faiss")
            with _open(tmp_path, hash_embedder) as other:
                corpus = other.corpus("b")
                hit = corpus.search("beta7 other")[0]
                assert (hit.source_id, hit.ranks.dense) == ("e7", 1)
                index = corpus._indexes.faiss
                assert index is not None and index.origin is None  # loaded from the store


def test_an_older_copy_of_the_vector_file_restored_alone_is_caught_up(
    tmp_path: Path, hash_embedder: SwitchableEmbedder
) -> None:
    """Review: an older ``vectors.faiss`` restored without its marker, holding as many
    vectors as the store, was taken as current: a deleted document came back to the
    vector arm and one added since was missing from it. The file records the store
    ``seq`` it reflects, and is caught up from there."""
    directory = tmp_path / "corpora" / "c"
    with _open(tmp_path, hash_embedder) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c"))
        corpus.add(DOCS)
        corpus.flush()
        shutil.copy(directory / "vectors.faiss", tmp_path / "vectors-old")
        corpus.delete(["d0"])
        corpus.add([Document(id="d30", title="Topic 30", text="alpha30 shared words")])
    shutil.copy(tmp_path / "vectors-old", directory / "vectors.faiss")  # the marker stays
    with _open(tmp_path, hash_embedder) as eng:
        corpus = eng.corpus("c")
        hit = corpus.search("alpha30 shared")[0]
        assert (hit.source_id, hit.ranks.dense) == ("d30", 1)
        index = corpus._indexes.faiss
        assert index is not None and len(index) == 30
        found = {i for i, _ in index.search(HashEmbedder().embed(["alpha0 shared"])[0], 30)}
        assert "d0" not in found and "d30" in found


def _count_keyword_upserts(corpus: Corpus) -> list[int]:
    """Wraps the corpus's tantivy index so that each upsert records how many documents
    it wrote."""
    counts: list[int] = []
    index = corpus._indexes.tantivy
    upsert = index.upsert

    def counting(docs: Sequence[SparseDocument]) -> None:
        counts.append(len(docs))
        upsert(docs)

    index.upsert = counting  # type: ignore[method-assign]
    return counts


def test_vector_only_writes_leave_the_keyword_index_current(tmp_path: Path) -> None:
    """Regression: healing vectors or switching the embedder changes no keyword content,
    but left the keyword marker behind the store, so the next writer re-indexed every
    document those writes touched (a whole corpus after a switch) — and this process's
    searches meanwhile went without their keyword arm."""
    models = {"model-a": HashEmbedder(dimension=16), "model-b": HashEmbedder(dimension=24)}
    switchable = SwitchableEmbedder(models["model-a"])

    def factory(spec: EmbedderSpec) -> Embedder:
        assert isinstance(spec, SentenceTransformerEmbedding)
        return switchable if spec.model == "model-a" else models[spec.model]

    with SearchEngine(tmp_path, embedder_factory=factory) as eng:
        corpus = eng.create_corpus(
            CorpusConfig(name="c", embedder=SentenceTransformerEmbedding(model="model-a"))
        )
        switchable.down = True
        corpus.add(DOCS[:20])  # stored degraded
        switchable.down = False
        counts = _count_keyword_upserts(corpus)
        assert corpus.repair() == 20
        corpus.add(DOCS[20:21])
        assert counts == [1]  # the new document only, not the 20 healed ones again
        directory = tmp_path / "corpora" / "c"
        assert eng.switch_embedder("c", "model-b") == 21
        assert int((directory / "tantivy.seq").read_text()) == corpus._store.seq
        corpus.add(DOCS[21:22])
        assert counts == [1, 1]
        hits = corpus.search("alpha3 shared", top_k=3)
        assert hits[0].source_id == "d3" and hits[0].ranks.sparse == 1


def test_an_add_that_heals_leaves_the_keyword_index_current(tmp_path: Path) -> None:
    """Regression: an ``add`` heals degraded documents after writing, while its keyword
    upserts are still batched; the heal's write did not move the batch's marker, so the
    store ended one write ahead of ``tantivy.seq`` and the next add replayed every healed
    document into tantivy (its keyword arm off in this process meanwhile)."""
    switchable = SwitchableEmbedder(HashEmbedder(dimension=16))
    with _open(tmp_path, switchable) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder="model-a"))
        switchable.down = True
        corpus.add(DOCS[:20])  # stored degraded
        switchable.down = False
        counts = _count_keyword_upserts(corpus)
        corpus.add(DOCS[20:21])  # writes d20, then heals d0..d19
        assert corpus.stats()["degraded"] == 0
        directory = tmp_path / "corpora" / "c"
        assert int((directory / "tantivy.seq").read_text()) == corpus._store.seq
        corpus.add(DOCS[21:22])
        assert counts == [1, 1]  # the new documents only, never the 20 healed ones


def test_an_index_holding_non_public_documents_is_rebuilt_without_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Keyword indexes hold public documents only (their statistics would otherwise leak
    non-public words into the order of public hits): one built before that rule is
    rebuilt once at open, and one built after it is left alone."""
    docs = [*DOCS[:5], Document(id="secret", text="alpha1 staff", access_groups=frozenset({"s"}))]
    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder=None))
        corpus.add(docs)
        index = corpus._indexes.tantivy
        assert index.doc_count() == 5
        old_style = index._to_tantivy(to_sparse_of(corpus, "secret"))  # as indexed before
        index._write(lambda writer: writer.add_document(old_style))
        assert index.doc_count() == 6
    with caplog.at_level(logging.WARNING), SearchEngine(tmp_path) as eng:
        corpus = eng.corpus("c")
        assert corpus._indexes.tantivy.doc_count() == 5
        assert [r.message for r in caplog.records if "rebuilding" in r.message]
        caplog.clear()
    with caplog.at_level(logging.WARNING), SearchEngine(tmp_path) as eng:
        assert eng.corpus("c").search("alpha1", top_k=5)[0].source_id == "d1"
        assert not [r.message for r in caplog.records if "rebuilding" in r.message]


def to_sparse_of(corpus: Corpus, source_id: str) -> SparseDocument:
    stored = corpus._store.get_many([source_id], public_only=False)[source_id]
    return SparseDocument(source_id=source_id, title=stored.title, text=stored.text)


def test_files_of_a_writer_killed_mid_commit_do_not_force_a_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer SIGKILLed inside tantivy's commit leaves that commit's files (named by its
    operation stamp) while ``meta.json`` still names the commit before. The next writer
    works at the same stamp and could not create them (``FileAlreadyExists``): the holder's
    catch-up failed and rebuilt the whole keyword index after an ordinary crash. Here the
    crash is replayed by putting back the ``meta.json`` and marker of before the delete."""
    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder=None))
        corpus.add(DOCS)
        directory = tmp_path / "corpora" / "c"
        meta_before = (directory / "tantivy" / "meta.json").read_bytes()
        marker_before = (directory / "tantivy.seq").read_text()
        corpus.delete(["d3"])
    (directory / "tantivy" / "meta.json").write_bytes(meta_before)
    (directory / "tantivy.seq").write_text(marker_before)
    rebuilds: list[int] = []
    original = KeywordIndexKeeper._rebuild

    def counted(self: KeywordIndexKeeper) -> None:
        rebuilds.append(1)
        original(self)

    monkeypatch.setattr(KeywordIndexKeeper, "_rebuild", counted)
    with SearchEngine(tmp_path) as eng:
        corpus = eng.corpus("c")
        assert rebuilds == []  # caught up from the marker, not rebuilt
        hits = corpus.search("alpha3 shared words", top_k=50)
        assert "d3" not in {h.source_id for h in hits} and len(hits) == len(DOCS) - 1
        corpus.delete(["d4"])  # later writes work at the next stamp
        assert "d4" not in {h.source_id for h in corpus.search("shared words", top_k=50)}
    assert rebuilds == []
