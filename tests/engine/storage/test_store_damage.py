"""A corpus whose store or config file is gone, emptied, replaced or restored from an older
copy: a clear ``StorageError`` naming the file, or indexes rebuilt from the store — never
an empty corpus made in its place, an index kept that disagrees with the store, or a
parser's own exception."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import uuid
from pathlib import Path

import pytest

from engine import CorpusConfig, Document, EngineError, SearchEngine, StorageError


def _corpus_with_documents(home: Path) -> Path:
    with SearchEngine(home) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="k", embedder=None))
        corpus.add(
            [Document(id=f"d{i}", title=f"doc {i}", text=f"common word{i}") for i in range(10)]
        )
    return home / "corpora" / "k"


def _index_count(directory: Path) -> int:
    import tantivy

    return int(tantivy.Index.open(str(directory / "tantivy")).searcher().num_docs)


@pytest.mark.parametrize("damage", ["missing", "empty", "another database"])
def test_a_store_that_is_gone_is_an_error_and_the_indexes_are_left_alone(
    tmp_path: Path, damage: str
) -> None:
    # A writable open made a new, empty store in its place, and the keyword index (the
    # last copy of the documents) was rebuilt empty to agree with it.
    directory = _corpus_with_documents(tmp_path / "e")
    store = directory / "store.sqlite3"
    store.unlink()
    if damage == "empty":
        store.touch()
    elif damage == "another database":
        sqlite3.connect(store).execute("CREATE TABLE t (x)").connection.close()
    for read_only in (False, True):
        with (
            SearchEngine(tmp_path / "e", read_only=read_only) as engine,
            pytest.raises(StorageError, match="store"),
        ):
            engine.corpus("k")
    assert _index_count(directory) == 10
    if damage == "missing":
        assert not store.exists()  # nothing made in its place


def test_a_store_restored_alone_from_an_older_copy_rebuilds_the_keyword_index(
    tmp_path: Path,
) -> None:
    # The index was ahead of the store (its marker past the store's seq) with as many
    # documents, so it was kept: d0 was never found again, d1 by a word it lost.
    directory = _corpus_with_documents(tmp_path / "e")
    store = directory / "store.sqlite3"
    backup = tmp_path / "backup.sqlite3"
    shutil.copy2(store, backup)
    with SearchEngine(tmp_path / "e") as engine:
        corpus = engine.corpus("k")
        corpus.delete(["d0"])
        corpus.add([Document(id="d1", title="doc 1", text="common rewritten")])
        corpus.add([Document(id="new", title="new", text="common newword")])
    shutil.copy2(backup, store)
    for suffix in ("-wal", "-shm"):
        Path(f"{store}{suffix}").unlink(missing_ok=True)
    with SearchEngine(tmp_path / "e") as engine:
        corpus = engine.corpus("k")
        found = {hit.source_id for hit in corpus.search("common", top_k=20)}
        assert found == {f"d{i}" for i in range(10)}
        assert [hit.source_id for hit in corpus.search("word0")] == ["d0"]
        assert [hit.source_id for hit in corpus.search("word1")] == ["d1"]
        assert corpus.search("rewritten") == []


@pytest.mark.parametrize(
    "content", [b"", b"{not json", b"\xdc\xff", b'{"name": "k", "window": -1}'], ids=repr
)
def test_a_damaged_config_is_a_storage_error_naming_the_file(
    tmp_path: Path, content: bytes
) -> None:
    directory = _corpus_with_documents(tmp_path / "e")
    (directory / "config.json").write_bytes(content)
    with SearchEngine(tmp_path / "e") as engine:
        assert engine.list_corpora() == ["k"]
        with pytest.raises(StorageError, match=r"config\.json cannot be read") as refused:
            engine.corpus("k")
        assert isinstance(refused.value, EngineError)
    assert os.path.isfile(directory / "store.sqlite3")


def _damage_a_document_store(directory: Path) -> None:
    segment = next((directory / "tantivy").glob("*.store"))
    with open(segment, "r+b") as handle:  # the first compressed block: opens, cannot be read
        handle.write(b"\xff" * 32)


def test_a_segment_a_search_cannot_read_is_rebuilt_by_the_next_writer(
    tmp_path: Path,
) -> None:
    # The index opened and its counts agreed, so it was kept: every search failed inside
    # tantivy and fell back to the database (a warning each time), for good.
    directory = _corpus_with_documents(tmp_path / "e")
    _damage_a_document_store(directory)
    with SearchEngine(tmp_path / "e") as engine:
        corpus = engine.corpus("k")
        first = corpus.search("common", top_k=20)  # the database answers it
        assert {hit.source_id for hit in first} == {f"d{i}" for i in range(10)}
        assert (directory / "tantivy.damaged").exists()
        assert not corpus._indexes.keyword_index_current
        corpus.add([Document(id="new", title="new", text="common fresh")])  # rebuilds
        assert corpus._indexes.keyword_index_current
        assert not (directory / "tantivy.damaged").exists()
        hits = corpus.search("common", top_k=20)
        assert len(hits) == 11 and all(hit.score > 0 for hit in hits)
    assert _index_count(directory) == 11


def test_a_damaged_segment_flagged_elsewhere_is_rebuilt_at_the_next_open(tmp_path: Path) -> None:
    directory = _corpus_with_documents(tmp_path / "e")
    _damage_a_document_store(directory)
    with SearchEngine(tmp_path / "e", read_only=True) as reader:
        seen = reader.corpus("k")
        assert len(seen.search("common", top_k=20)) == 10
        assert (directory / "tantivy.damaged").exists()
        with SearchEngine(tmp_path / "e") as engine:
            corpus = engine.corpus("k")
            assert corpus._indexes.keyword_index_current
            assert [hit.source_id for hit in corpus.search("word3")] == ["d3"]
        assert not (directory / "tantivy.damaged").exists()
        # The reader that saw the damage uses the rebuilt index at its next search: a
        # rebuild at an open moves no store seq, and it kept to the database until a write.
        assert [hit.source_id for hit in seen.search("word3")] == ["d3"]
        assert seen._indexes.keyword_index_current


def test_files_killed_writes_leave_are_swept(tmp_path: Path) -> None:
    # tantivy writes meta.json through a .tmp file it renames; a drop renames the corpus
    # away before deleting it. A kill between left either for good.
    directory = _corpus_with_documents(tmp_path / "e")
    stray = directory / "tantivy" / ".tmpAbC123"
    stray.write_text("{}")
    tombstone = directory.parent / f".dropped-old-{uuid.uuid4().hex}"
    (tombstone / "tantivy").mkdir(parents=True)
    with SearchEngine(tmp_path / "e") as engine:
        engine.corpus("k")
        assert not stray.exists()
        engine.create_corpus(CorpusConfig(name="other", embedder=None))
        assert not tombstone.exists()


def test_a_search_failing_on_a_dropped_corpus_flags_nothing(tmp_path: Path) -> None:
    # A search racing a drop reads files the drop took away: that is no damage, and the
    # flag landed in the directory of the corpus re-created under the same name.
    directory = _corpus_with_documents(tmp_path / "e")
    with SearchEngine(tmp_path / "e") as reader:
        held = reader.corpus("k")
        with SearchEngine(tmp_path / "e") as other:
            other.drop_corpus("k")
            other.create_corpus(CorpusConfig(name="k", embedder=None))
        held._indexes.keyword_index_unreadable()  # what the racing search reports
    assert not (directory / "tantivy.damaged").exists()


def test_a_config_an_older_version_accepted_still_opens(tmp_path: Path) -> None:
    # Rules added later (a weight of 0 or at least 1e-6, a dialable Ollama host) were
    # applied to stored configs too: the corpus no longer opened, and the error said the
    # file was damaged and to drop the corpus.
    directory = _corpus_with_documents(tmp_path / "e")
    raw = json.loads((directory / "config.json").read_text("utf-8"))
    raw["weights"] = {"sparse": 1e-7, "dense": 1.0}
    (directory / "config.json").write_text(json.dumps(raw), encoding="utf-8")
    with SearchEngine(tmp_path / "e") as engine:
        corpus = engine.corpus("k")
        assert corpus.config.weights.sparse == 1e-7  # as stored, and fused as before
        assert len(corpus.search("common", top_k=20)) == 10
    for bad in ({"sparse": -1.0, "dense": 1.0}, {"sparse": "x", "dense": 1.0}):
        raw["weights"] = bad  # never valid: refused, naming the field
        (directory / "config.json").write_text(json.dumps(raw), encoding="utf-8")
        with (
            SearchEngine(tmp_path / "e") as engine,
            pytest.raises(StorageError, match=r"weights\.sparse"),
        ):
            engine.corpus("k")


def test_a_read_only_open_does_not_search_an_index_holding_non_public_documents(
    tmp_path: Path,
) -> None:
    # Versions before the public-only index rule indexed non-public documents too, with
    # the schema of today: their words moved the order of public hits. Only a writable
    # open compared the counts (and rebuilt); a read-only one searched the old index.
    from sparse import SparseDocument

    home = tmp_path / "e"
    with SearchEngine(home) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="k", embedder=None))
        corpus.add(
            [
                Document(id="p1", title="one", text="pony"),
                Document(id="p2", title="two", text="pony pony meadow"),
                *(
                    Document(id=f"m{i}", text="meadow memo", access_groups=["staff"])
                    for i in range(40)
                ),
            ]
        )
        # What such a version left: the non-public memos in the index, at the same seq.
        corpus._indexes.tantivy.upsert(
            [SparseDocument(source_id=f"m{i}", title="", text="meadow memo") for i in range(40)]
        )
    with SearchEngine(home, read_only=True) as reader:
        seen = reader.corpus("k")
        assert not seen._indexes.keyword_index_current  # the database answers
        assert {hit.source_id for hit in seen.search("pony meadow")} == {"p1", "p2"}
        with SearchEngine(home) as engine:  # the writable open rebuilds it
            engine.corpus("k")
        seen.search("pony")
        assert seen._indexes.keyword_index_current


def test_a_follower_that_saw_a_disagreement_rebuilds_when_it_writes(tmp_path: Path) -> None:
    # It opened while another process held the write lock, saw the index hold more than
    # the store's public documents, then became the writer itself: its write neither
    # rebuilt the index nor trusted it again, and its marker told the other followers
    # that the old index was fine.
    import fcntl

    from sparse import SparseDocument

    home = tmp_path / "e"
    with SearchEngine(home) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="c", embedder=None))
        corpus.add([Document(id=f"d{i}", text=f"alpha beta {i}") for i in range(5)])
        corpus.add([Document(id="secret", text="alpha secretword", access_groups=["g"])])
        corpus._indexes.tantivy.upsert([SparseDocument(source_id="secret", title="", text="alpha")])
    lock = os.open(home / "corpora" / "c" / "write.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process's write under way
        first, second = SearchEngine(home), SearchEngine(home)
        writer, other = first.corpus("c"), second.corpus("c")
    finally:
        os.close(lock)
    try:
        assert not writer._indexes.keyword_index_current
        assert not other._indexes.keyword_index_current
        writer.add([Document(id="new", text="alpha gamma")])  # takes the lock: rebuilds
        other.search("alpha")
        assert writer._indexes.keyword_index_current and other._indexes.keyword_index_current
        assert writer._indexes.tantivy.doc_count() == 6  # d0..d4 and new: public only
    finally:
        first.close()
        second.close()
