"""Deletions are forgotten once every index file reflects them (the newest few are kept).

The store records one tombstone row per deleted id so that an index file — or another
process's in-memory view — that lags can replay the deletions it missed. Kept for good,
a corpus that churns through ids grows by a row per id ever deleted. The write-lock
holder forgets those the index files on disk already reflect, keeping the newest
``_DELETIONS_KEPT``; whatever lags further (an older index file restored, a process that
followed nothing for a long time) is rebuilt or reloaded from the store, never left
holding a deleted document.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
from pathlib import Path

import pytest

from engine import CorpusConfig, Document, SearchEngine
from engine.write import indexes
from tests.support.fakes import SwitchableEmbedder

KEPT = 3
DOCS = [Document(id=f"d{i}", title=f"Topic {i}", text=f"alpha{i} shared words") for i in range(30)]


@pytest.fixture(autouse=True)
def _few_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(indexes, "_DELETIONS_KEPT", KEPT)


def _open(path: Path, embedder: SwitchableEmbedder) -> SearchEngine:
    return SearchEngine(path, embedder_factory=lambda spec: embedder)


def _tombstones(corpus_dir: Path) -> list[tuple[str, int]]:
    conn = sqlite3.connect(f"file:{corpus_dir / 'store.sqlite3'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT source_id, seq FROM tombstones ORDER BY seq").fetchall()
        return [(str(r[0]), int(r[1])) for r in rows]
    finally:
        conn.close()


def _delete_one_by_one(eng: SearchEngine, ids: list[str]) -> None:
    corpus = eng.corpus("c")
    for doc_id in ids:  # one store write each: each deletion its own seq
        assert corpus.delete([doc_id]) == 1


def test_deletions_the_index_files_reflect_are_forgotten_except_the_newest(
    tmp_path: Path, hash_embedder: SwitchableEmbedder
) -> None:
    corpus_dir = tmp_path / "corpora" / "c"
    with _open(tmp_path, hash_embedder) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c"))
        corpus.add(DOCS)
        _delete_one_by_one(eng, [f"d{i}" for i in range(10)])
        corpus.flush()  # the vector file saved: every file reflects every deletion
        assert [sid for sid, _ in _tombstones(corpus_dir)] == ["d7", "d8", "d9"]
        hits = corpus.search("shared words", top_k=50)
        assert sorted(h.source_id for h in hits) == sorted(f"d{i}" for i in range(10, 30))
    with _open(tmp_path, hash_embedder) as eng:  # reopens without a rebuild
        assert eng.corpus("c").stats()["vectors"] == 20


def test_deletions_an_unsaved_vector_file_lacks_are_kept(
    tmp_path: Path, hash_embedder: SwitchableEmbedder
) -> None:
    """The vector file is saved lazily: deletions after its last save stay recorded, so
    the next open (after a crash, say) can still replay them into it."""
    corpus_dir = tmp_path / "corpora" / "c"
    with _open(tmp_path, hash_embedder) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c"))
        corpus.add(DOCS)
        corpus.flush()
        saved_at = int((corpus_dir / "vectors.seq").read_text())
        _delete_one_by_one(eng, [f"d{i}" for i in range(10)])
        # Ten deletions reach the pruning threshold; none is reflected by the file.
        assert int((corpus_dir / "vectors.seq").read_text()) == saved_at
        assert len(_tombstones(corpus_dir)) == 10


def test_a_keyword_only_corpus_prunes_as_it_deletes(
    tmp_path: Path, hash_embedder: SwitchableEmbedder
) -> None:
    corpus_dir = tmp_path / "corpora" / "c"
    with _open(tmp_path, hash_embedder) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder=None))
        corpus.add(DOCS)
        _delete_one_by_one(eng, [f"d{i}" for i in range(2 * KEPT)])  # no flush
        assert len(_tombstones(corpus_dir)) == KEPT


def test_index_files_older_than_the_pruned_deletions_are_rebuilt(
    tmp_path: Path, hash_embedder: SwitchableEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    """A copy of ``tantivy/`` and ``vectors.faiss`` from before the deletions (a crash
    before their save, an older backup of them restored): the store no longer knows
    all that was deleted since, so both are rebuilt rather than caught up."""
    corpus_dir = tmp_path / "corpora" / "c"
    with _open(tmp_path, hash_embedder) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c"))
        corpus.add(DOCS)
        corpus.flush()
        shutil.copytree(corpus_dir / "tantivy", tmp_path / "tantivy-copy")
        shutil.copy(corpus_dir / "vectors.faiss", tmp_path / "vectors-copy")
        markers = {name: (corpus_dir / name).read_text() for name in ("tantivy.seq", "vectors.seq")}
        _delete_one_by_one(eng, [f"d{i}" for i in range(10)])
        # As many new documents as deleted: the copies' document counts match the
        # store's, so only the pruned history can tell them apart.
        corpus.add([Document(id=f"n{i}", title="New", text=f"beta{i} shared") for i in range(10)])
        corpus.flush()
        assert len(_tombstones(corpus_dir)) == KEPT
    shutil.rmtree(corpus_dir / "tantivy")
    shutil.copytree(tmp_path / "tantivy-copy", corpus_dir / "tantivy")
    shutil.copy(tmp_path / "vectors-copy", corpus_dir / "vectors.faiss")
    for name, text in markers.items():
        (corpus_dir / name).write_text(text)
    with (
        caplog.at_level(logging.INFO, logger="engine.write"),
        _open(tmp_path, hash_embedder) as eng,
    ):
        corpus = eng.corpus("c")
        hits = corpus.search("alpha3 shared", top_k=50)
        found = {h.source_id for h in hits}
        assert found == {f"d{i}" for i in range(10, 30)} | {f"n{i}" for i in range(10)}
        assert hits[0].source_id != "d3"
        assert all(h.ranks.dense is not None for h in hits)
        assert corpus.stats()["vectors"] == 30
    messages = [r.getMessage() for r in caplog.records]
    assert any("keyword index older than the store's kept deletions" in m for m in messages)
    assert any("vector index older than the store's kept deletions" in m for m in messages)


def test_a_process_further_behind_than_the_kept_deletions_reloads(
    tmp_path: Path, hash_embedder: SwitchableEmbedder
) -> None:
    """A second engine on the directory (another process, as far as the files go) that
    searched nothing while many documents were deleted: its in-memory vector index is
    reloaded from the store, not left holding the deleted documents' vectors."""
    with _open(tmp_path, hash_embedder) as writer:
        corpus = writer.create_corpus(CorpusConfig(name="c"))
        corpus.add(DOCS)
        corpus.flush()
        with _open(tmp_path, hash_embedder) as reader:
            follower = reader.corpus("c")
            assert follower.stats()["vectors"] == 30
            _delete_one_by_one(writer, [f"d{i}" for i in range(10)])
            corpus.flush()
            hits = follower.search("alpha4 shared words", top_k=50)
            assert {h.source_id for h in hits} == {f"d{i}" for i in range(10, 30)}
            assert follower.stats()["vectors"] == 20
