"""Documented caps (``engine.limits``) hold, and a full disk fails a write cleanly.

Caps: document size and batch size refused at ``add`` with nothing stored; excerpts at
most ``sparse.MAX_EXCERPT_LENGTH``; ``fetch_source`` truncated at ``MAX_FETCH_CHARS``
(and says so); ``grep`` pattern length, match count and time budget; ``top_k`` clamp.
Disk full: a real 2 MiB tmpfs when the test may mount one (root), and fault injection
(``ENOSPC`` / SQLite "disk is full") at the store and index write layers everywhere.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import (
    Corpus,
    CorpusConfig,
    Document,
    EngineError,
    InvalidArgument,
    SearchEngine,
    SentenceTransformerEmbedding,
    SourceNotFound,
    StorageError,
)
from engine.limits import (
    MAX_BATCH_SIZE,
    MAX_DOCUMENT_CHARS,
    MAX_FETCH_CHARS,
    MAX_GREP_MATCHES,
    MAX_GREP_PATTERN,
    MAX_TOP_K,
)
from engine.storage import DocumentStore
from engine.storage.connections import StoreConnections
from sparse import MAX_EXCERPT_LENGTH, TantivyIndex
from tests.support.fakes import WordHashEmbedder, factory_for
from tests.support.reliability_support import store_snapshot

FAKE = SentenceTransformerEmbedding(model="fake")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SearchEngine]:
    with SearchEngine(tmp_path / "engine", embedder_factory=factory_for(WordHashEmbedder())) as e:
        yield e


@pytest.fixture(params=["keyword", "hybrid"])
def corpus(request: pytest.FixtureRequest, engine: SearchEngine) -> Corpus:
    embedder = FAKE if request.param == "hybrid" else None
    c = engine.create_corpus(CorpusConfig(name=request.param, embedder=embedder))
    c.add([Document(id=f"seed-{i}", title="seed", text=f"seed words number {i}") for i in range(5)])
    return c


def _store(engine: SearchEngine, corpus: Corpus) -> Path:
    return engine.path / "corpora" / corpus.name


def test_oversized_document_is_refused_and_nothing_is_stored(
    engine: SearchEngine, corpus: Corpus
) -> None:
    before = store_snapshot(_store(engine, corpus))
    batch = [
        Document(id="fine", text="fine"),
        Document(id="huge", text="x" * (MAX_DOCUMENT_CHARS + 1)),
    ]
    with pytest.raises(InvalidArgument, match="huge"):
        corpus.add(batch)
    assert store_snapshot(_store(engine, corpus)) == before
    corpus.add([Document(id="max", text="word " * (MAX_DOCUMENT_CHARS // 5))])  # at the cap
    assert len(corpus) == 6


def test_batch_size_cap_for_add_and_delete(engine: SearchEngine, corpus: Corpus) -> None:
    before = store_snapshot(_store(engine, corpus))
    too_many = [Document(id=f"d{i}") for i in range(MAX_BATCH_SIZE + 1)]
    with pytest.raises(InvalidArgument, match=str(MAX_BATCH_SIZE)):
        corpus.add(too_many)
    with pytest.raises(InvalidArgument, match=str(MAX_BATCH_SIZE)):
        corpus.delete([f"d{i}" for i in range(MAX_BATCH_SIZE + 1)])
    assert store_snapshot(_store(engine, corpus)) == before


def test_excerpts_fetch_and_top_k_are_capped(corpus: Corpus) -> None:
    long_text = " ".join(f"filler{i}" for i in range(60_000)) + " needle " + "tail " * 1000
    corpus.add([Document(id=f"long-{i}", title="long", text=long_text) for i in range(3)])
    hits = corpus.search("needle filler7", top_k=10**9)
    assert 0 < len(hits) <= MAX_TOP_K
    assert all(len(h.excerpt) <= MAX_EXCERPT_LENGTH for h in hits)
    assert any("needle" in h.excerpt for h in hits if h.source_id.startswith("long"))
    source = corpus.fetch_source("long-0")
    assert source.truncated and len(source.text) == MAX_FETCH_CHARS
    assert long_text.startswith(source.text)
    assert not corpus.fetch_source("seed-0").truncated


def test_grep_caps_pattern_length_and_matches(corpus: Corpus) -> None:
    corpus.add([Document(id="many", text="hit " * 5_000)])
    assert len(corpus.grep("hit", limit=10**9)) == MAX_GREP_MATCHES
    assert len(corpus.grep("hit", limit=7)) == 7
    with pytest.raises(InvalidArgument):
        corpus.grep("h" * (MAX_GREP_PATTERN + 1))


@pytest.mark.timeout(60)  # GREP_TIMEOUT_S bounds every call; a hang trips this
def test_grep_time_budget_ends_a_catastrophic_pattern(corpus: Corpus) -> None:
    from engine.errors import GrepTimeout

    corpus.add([Document(id=f"redos-{i}", text="a" * 3_000 + "!") for i in range(20)])
    try:
        found = corpus.grep(r"(a|aa)+(b|c)$", limit=5)
    except GrepTimeout as exc:  # the budget ran out: an explicit error, never a short list
        assert exc.matches == ()
    else:
        assert found == []  # finished within budget: no match exists


# -- disk full ----------------------------------------------------------------------------


def _filler(i: int) -> Document:
    return Document(id=f"fill-{i}", text="filler words " * 400 + str(i))


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode()[:100]}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["keyword", "hybrid"])
def test_full_disk_fails_the_write_and_leaves_the_corpus_readable(
    tiny_disk: Path, kind: str
) -> None:
    engine = SearchEngine(tiny_disk / "engine", embedder_factory=factory_for(WordHashEmbedder()))
    corpus = engine.create_corpus(
        CorpusConfig(name="c", embedder=FAKE if kind == "hybrid" else None)
    )
    acked = [Document(id=f"ok-{i}", text=f"acknowledged text {i}") for i in range(20)]
    corpus.add(acked)
    error: EngineError | None = None
    for round_ in range(20):
        try:
            corpus.add([_filler(round_ * 100 + i) for i in range(100)])
        except EngineError as exc:
            error = exc
            break
    assert isinstance(error, StorageError), "the disk never filled"
    assert "full" in str(error)
    stored = len(corpus)
    assert stored % 100 == 20, "a failed batch is partly stored"
    hits = {h.source_id for h in corpus.search("acknowledged text", top_k=50)}
    assert {d.id for d in acked} <= hits
    assert corpus.fetch_source("ok-3").text == "acknowledged text 3"
    # Room again: writes work, the index catches up, nothing acknowledged was lost.
    subprocess.run(["mount", "-o", "remount,size=64m", str(tiny_disk)], check=True)
    corpus.add([Document(id="after", text="written after the disk had room again")])
    assert corpus.search("room again")[0].source_id == "after"
    engine.close()
    with SearchEngine(
        tiny_disk / "engine", embedder_factory=factory_for(WordHashEmbedder())
    ) as again:
        reopened = again.corpus("c")
        assert len(reopened) == stored + 1
        assert reopened.stats()["degraded"] == 0


def _fill(directory: Path) -> None:
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for size in (65_536, 4_096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)


@pytest.mark.timeout(120)
def test_a_cleanly_closed_corpus_opens_and_answers_on_a_full_disk(tiny_disk: Path) -> None:
    """Regression: a clean close removes the store's -wal/-shm files, and a writer must
    create them even to read, so on a full disk the corpus did not open at all."""
    with SearchEngine(tiny_disk / "engine") as engine:
        engine.create_corpus(CorpusConfig(name="c", embedder=None)).add(
            [Document(id=f"d{i}", text=f"alpha{i} words") for i in range(50)]
        )
    _fill(tiny_disk)
    with SearchEngine(tiny_disk / "engine") as engine:
        corpus = engine.corpus("c")
        assert corpus.search("alpha3")[0].source_id == "d3"
        with pytest.raises(StorageError, match="full"):
            corpus.add([Document(id="late", text="no room")])
        (tiny_disk / "filler").unlink()
        with SearchEngine(tiny_disk / "engine") as writer:  # another process, with room
            writer.corpus("c").add([Document(id="late", text="room again")])
            writer.corpus("c").delete(["d3"])
            # Seen by the corpus opened on the full disk (its store was read with
            # immutable=1, which never sees a commit).
            assert corpus.search("room again")[0].source_id == "late"
            assert "d3" not in {h.source_id for h in corpus.search("alpha3")}
        assert corpus.search("room again")[0].source_id == "late"
    with SearchEngine(tiny_disk / "engine") as engine:
        engine.corpus("c").add([Document(id="later", text="room for writes")])
        assert engine.corpus("c").search("room for writes")[0].source_id == "later"


def test_a_store_that_cannot_open_a_writer_for_lack_of_room_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same, by fault injection (no tmpfs needed): SQLITE_FULL or an I/O error while
    opening the writer opens the store the read-only way; any other error still raises."""
    with SearchEngine(tmp_path) as engine:
        engine.create_corpus(CorpusConfig(name="c", embedder=None)).add(
            [Document(id="a", text="kept words")]
        )

    def no_room(self: StoreConnections) -> sqlite3.Connection:
        exc = sqlite3.OperationalError("database or disk is full")
        exc.sqlite_errorcode = 13  # type: ignore[attr-defined]
        raise exc

    monkeypatch.setattr(StoreConnections, "_open_writer", no_room)
    with SearchEngine(tmp_path) as engine:
        corpus = engine.corpus("c")
        assert [h.source_id for h in corpus.search("kept words")] == ["a"]
        assert corpus.fetch_source("a").text == "kept words"
        with pytest.raises(StorageError, match="full"):
            corpus.delete(["a"])

    def locked(self: StoreConnections) -> sqlite3.Connection:
        raise sqlite3.OperationalError("database schema is locked")

    def cannot_open(self: StoreConnections) -> sqlite3.Connection:
        exc = sqlite3.OperationalError("unable to open database file")
        exc.sqlite_errorcode = 14  # type: ignore[attr-defined]  # SQLITE_CANTOPEN
        raise exc

    # Another failure, or CANTOPEN with room on the disk (a permission, a descriptor
    # limit): the real error, never "disk full" and a store quietly open read-only.
    for failure in (locked, cannot_open):
        monkeypatch.setattr(StoreConnections, "_open_writer", failure)
        with SearchEngine(tmp_path) as engine, pytest.raises(EngineError) as raised:
            engine.corpus("c")
        assert "full" not in str(raised.value)


def test_a_corpus_created_without_room_says_the_disk_is_full(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: SQLite leaves an empty file behind when a new store cannot be written;
    the full-disk fallback took it for a store to read and answered "no such table"."""

    def no_room(self: StoreConnections) -> sqlite3.Connection:
        self._path.touch()  # what SQLite leaves
        exc = sqlite3.OperationalError("database or disk is full")
        exc.sqlite_errorcode = 13  # type: ignore[attr-defined]
        raise exc

    monkeypatch.setattr(StoreConnections, "_open_writer", no_room)
    monkeypatch.setattr("engine.storage.connections.out_of_room", lambda exc, directory: True)
    with SearchEngine(tmp_path) as engine:
        with pytest.raises(StorageError, match="disk is full"):
            engine.create_corpus(CorpusConfig(name="c", embedder=None))
        assert engine.list_corpora() == []


def test_a_store_read_with_immutable_sees_the_next_commit(tmp_path: Path) -> None:
    """A read-only store falls back to SQLite's ``immutable=1`` when no process could
    write it at connect time (no -shm file and no room or right to make one); that mode
    ignores the log, so the first commit another process makes switches the thread to an
    ordinary read-only connection (before, it served deleted documents for good)."""
    with SearchEngine(tmp_path) as engine:
        engine.create_corpus(CorpusConfig(name="c", embedder=None)).add(
            [Document(id="a", text="kept words"), Document(id="b", text="doomed words")]
        )
    with SearchEngine(tmp_path, read_only=True) as reader:
        corpus = reader.corpus("c")
        connections = corpus._store._connections
        connections._local.reader.close()  # reconnect this thread the immutable way
        connections._local.reader = None
        connections._immutable = True
        assert connections.reader_handle().immutable
        assert {h.source_id for h in corpus.search("words")} == {"a", "b"}
        with SearchEngine(tmp_path) as writer:
            writer.corpus("c").delete(["b"])
            writer.corpus("c").add([Document(id="c", text="new words")])
            assert {h.source_id for h in corpus.search("words")} == {"a", "c"}
            with pytest.raises(SourceNotFound):
                corpus.fetch_source("b")
        assert not connections.reader_handle().immutable


def test_flush_on_a_full_disk_raises_an_engine_error(
    engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = engine.create_corpus(CorpusConfig(name="hy", embedder=FAKE))
    corpus.add([Document(id="a", text="some text")])

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("dense.FaissIndex.save", full)
    with pytest.raises(EngineError):
        corpus.flush()


def test_store_disk_full_is_a_storage_error_and_search_still_answers(
    engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = engine.create_corpus(CorpusConfig(name="kw", embedder=None))
    corpus.add([Document(id="a", text="kept words")])
    real = DocumentStore._next_seq

    def full(self: DocumentStore, conn: sqlite3.Connection) -> int:
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(DocumentStore, "_next_seq", full)
    with pytest.raises(StorageError, match="full"):
        corpus.add([Document(id="b", text="lost words")])
    with pytest.raises(StorageError):
        corpus.delete(["a"])
    assert [h.source_id for h in corpus.search("kept words")] == ["a"]
    monkeypatch.setattr(DocumentStore, "_next_seq", real)
    corpus.add([Document(id="b", text="later words")])  # the writer recovered
    assert len(corpus) == 2


def test_keyword_index_disk_full_is_contained_and_caught_up(
    engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store is the truth: an index write failing with ENOSPC does not fail ``add``."""
    corpus = engine.create_corpus(CorpusConfig(name="kw", embedder=None))
    real = TantivyIndex.upsert

    def full(self: TantivyIndex, docs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(TantivyIndex, "upsert", full)
    corpus.add([Document(id="a", text="durable words")])  # acknowledged: no exception
    assert corpus.fetch_source("a").text == "durable words"
    monkeypatch.setattr(TantivyIndex, "upsert", real)
    corpus.add([Document(id="b", text="other words")])  # catches the index up
    assert corpus._indexes.tantivy.doc_count() == 2
    assert [h.source_id for h in corpus.search("durable")] == ["a"]


def test_acknowledged_document_is_searchable_while_the_keyword_index_is_behind(
    engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = engine.create_corpus(CorpusConfig(name="kw", embedder=None))

    def full(self: TantivyIndex, docs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(TantivyIndex, "upsert", full)
    corpus.add([Document(id="a", text="durable words")])
    assert [h.source_id for h in corpus.search("durable")] == ["a"]


def test_a_failed_write_never_poisons_the_next_one(
    engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = engine.create_corpus(CorpusConfig(name="kw", embedder=None))
    calls = {"n": 0}
    real_dumps = __import__("json").dumps

    def flaky(value: object, *args: object, **kwargs: object) -> str:
        calls["n"] += 1
        if calls["n"] == 1:
            raise MemoryError("injected mid-transaction")
        return str(real_dumps(value, *args, **kwargs))

    monkeypatch.setattr("engine.storage.store.json.dumps", flaky)
    with pytest.raises(MemoryError):
        corpus.add([Document(id="a", text="first")])
    corpus.add([Document(id="b", text="second")])  # must not inherit an open transaction
    assert len(corpus) == 1


def _open_files_under(directory: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(directory)):
                found.append(target)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_closing_an_engine_releases_its_files_without_the_garbage_collector(
    tmp_path: Path,
) -> None:
    """The vector file is memory-mapped when a corpus reopens; a closed engine (which a
    caller may keep referring to) must not hold it open until a collection runs."""
    factory = factory_for(WordHashEmbedder())
    with SearchEngine(tmp_path, embedder_factory=factory) as engine:
        engine.create_corpus(CorpusConfig(name="v", embedder=FAKE)).add(
            [Document(id=f"d{i}", text=f"words number {i}") for i in range(20)]
        )
    kept = []
    gc.disable()
    try:
        for _ in range(3):
            engine = SearchEngine(tmp_path, embedder_factory=factory)
            assert engine.corpus("v").search("words number")
            engine.close()
            kept.append(engine)
            assert _open_files_under(tmp_path / "corpora") == []
    finally:
        gc.enable()
