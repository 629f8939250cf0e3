"""An add that makes public documents non-public takes them out of the keyword index
before its store write commits (``KeywordIndexKeeper.withdraw``).

A bulk add commits the keyword index once at its end, while the store has each chunk at
once; without the withdrawal, a keyword search in the meantime ranked the privatized
documents' old public versions and the store check then dropped them: a short page whose
``ranks.sparse`` skipped their places. Here the add is held right after that store write
commits, and searches — in this engine and in another one on the same directory (as
another process: its own tantivy reader) — must get full pages, ranks 1..n, none of the
privatized documents.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from engine import Corpus, CorpusConfig, Document, SearchEngine, SourceNotFound, StorageError
from engine.storage import DocumentStore, StoredDocument
from engine.write import keyword_keeper
from sparse import SparseDocument, SparseError, TantivyIndex
from tests.support.fakes import WordHashEmbedder, factory_for

TOP_K = 10
PRIVATIZED = [f"p{i}" for i in range(5)]
WAIT_S = 60.0


def _public_docs() -> list[Document]:
    """Five documents that rank first for "alpha" and twenty that rank after them."""
    strong = [
        Document(id=sid, title=f"Alpha {sid}", text=f"alpha alpha alpha {sid} strong")
        for sid in PRIVATIZED
    ]
    weak = [
        Document(id=f"q{i:02d}", title=f"Item {i}", text=f"alpha once among many other words {i}")
        for i in range(20)
    ]
    return strong + weak


def _privatized() -> list[Document]:
    return [
        Document(
            id=sid,
            title=f"Alpha {sid}",
            text=f"alpha alpha alpha {sid} strong",
            access_groups=("staff",),
        )
        for sid in PRIVATIZED
    ]


class StoreHold:
    """Holds the first store write that stores a non-public document, right after it
    committed, until ``release`` (the add's keyword commit is still to come)."""

    def __init__(self) -> None:
        self.committed = threading.Event()
        self.release = threading.Event()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = DocumentStore.upsert

        def upsert(
            store: DocumentStore, docs: Sequence[StoredDocument], model: str | None
        ) -> tuple[int, int]:
            result = real(store, docs, model)
            if not self.committed.is_set() and any(not d.is_public for d in docs):
                self.committed.set()
                if not self.release.wait(WAIT_S):
                    raise TimeoutError("the test never released the add")
            return result

        monkeypatch.setattr(DocumentStore, "upsert", upsert)

    @contextlib.contextmanager
    def running(self, add: Callable[[], object]) -> Iterator[None]:
        """Runs ``add`` on a thread and the block once its store write is held; then lets
        it finish, and checks that it did, without error."""
        thread, errors = _in_thread(add)
        try:
            assert self.committed.wait(WAIT_S)
            yield
        finally:
            self.release.set()
            thread.join(WAIT_S)
        assert not thread.is_alive() and errors == []


def _in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # reported by the test, not lost in the thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def _assert_full_page(corpus: Corpus) -> None:
    page = corpus.search("alpha", top_k=TOP_K)
    assert [p.source_id for p in page if p.source_id in PRIVATIZED] == []
    assert len(page) == TOP_K
    assert [p.ranks.sparse for p in page] == list(range(1, TOP_K + 1))


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[tuple[SearchEngine, SearchEngine]]:
    with SearchEngine(tmp_path) as writer, SearchEngine(tmp_path) as other:
        writer.create_corpus(CorpusConfig(name="c", embedder=None)).add(_public_docs())
        yield writer, other


@pytest.mark.timeout(120)
@pytest.mark.parametrize("reader", ["same engine", "other engine"])
def test_pages_stay_full_while_an_add_privatizes_documents(
    engines: tuple[SearchEngine, SearchEngine], monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    writer, other = engines
    corpus = writer.corpus("c")
    searcher = corpus if reader == "same engine" else other.corpus("c")
    page = searcher.search("alpha", top_k=TOP_K)
    assert {p.source_id for p in page[:5]} == set(PRIVATIZED)  # they rank first before
    hold = StoreHold()
    hold.install(monkeypatch)
    # New public documents too: the add goes on batching its keyword commit.
    extra = [Document(id=f"n{i}", text=f"unrelated words {i}") for i in range(3)]
    with hold.running(lambda: corpus.add([*_privatized(), *extra])):
        with pytest.raises(SourceNotFound):  # the store has made them non-public
            searcher.fetch_source("p0")
        _assert_full_page(searcher)
    _assert_full_page(searcher)
    _assert_full_page(corpus)


@pytest.mark.timeout(120)
def test_a_process_that_reloaded_inside_the_withdrawal_reloads_again(
    engines: tuple[SearchEngine, SearchEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process polling the marker (it lags inside a bulk add) can reload at the
    lowered marker before the withdrawal's delete commits; the marker is written again
    after it, at the same ``seq``, and that process must reload once more (it compares
    the marker file, not only its number)."""
    writer, other = engines
    corpus, searcher = writer.corpus("c"), other.corpus("c")
    first_chunk = [Document(id=f"n{i:03d}", text=f"unrelated words {i}") for i in range(512)]
    real_delete = TantivyIndex.delete
    pages_inside: list[list[str]] = []

    def delete_after_a_search(index: TantivyIndex, source_ids: object) -> None:
        if not pages_inside:  # the withdrawal: the marker is lowered, the delete to come
            pages_inside.append([p.source_id for p in searcher.search("alpha", top_k=TOP_K)])
        real_delete(index, source_ids)  # type: ignore[arg-type]

    monkeypatch.setattr(TantivyIndex, "delete", delete_after_a_search)
    hold = StoreHold()
    hold.install(monkeypatch)
    searcher.search("alpha")  # follows: from the first chunk on, the marker lags its store
    with hold.running(lambda: corpus.add([*first_chunk, *_privatized()])):
        # Still public when that search ran: it may show them.
        assert len(pages_inside) == 1 and set(PRIVATIZED) <= set(pages_inside[0])
        _assert_full_page(searcher)
    _assert_full_page(searcher)


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every keyword-index commit, by kind (``upsert`` and ``delete`` each commit once)."""
    seen: list[str] = []
    real_upsert, real_delete = TantivyIndex.upsert, TantivyIndex.delete

    def upsert(index: TantivyIndex, docs: Sequence[object]) -> None:
        seen.append("upsert")
        real_upsert(index, docs)  # type: ignore[arg-type]

    def delete(index: TantivyIndex, ids: object) -> None:
        seen.append("delete")
        real_delete(index, ids)  # type: ignore[arg-type]

    monkeypatch.setattr(TantivyIndex, "upsert", upsert)
    monkeypatch.setattr(TantivyIndex, "delete", delete)
    return seen


def test_only_a_store_write_that_privatizes_costs_an_extra_commit(
    tmp_path: Path, commits: list[str]
) -> None:
    many = [Document(id=f"m{i:04d}", text=f"bulk words {i}") for i in range(1_300)]
    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder=None))
        corpus.add(many)  # new and public, three store chunks
        assert commits == ["upsert"]
        corpus.add([Document(id=d.id, text=d.text + " again") for d in many[:600]])  # public
        assert commits == ["upsert"] * 2
        hidden = [
            Document(id=f"h{i}", text="hidden words", access_groups=("staff",)) for i in range(5)
        ]
        corpus.add(hidden)  # new and non-public: nothing of them was public
        corpus.add(
            [Document(id=d.id, text="hidden again", access_groups=d.access_groups) for d in hidden]
        )
        assert commits == ["upsert"] * 4
        # Three store chunks, the second of which makes five public documents non-public:
        # one commit more, and only for that chunk.
        privatizing = [
            Document(id=d.id, text=d.text, access_groups=("staff",) if 600 <= i < 605 else ())
            for i, d in enumerate(many)
        ]
        corpus.add(privatizing)
        assert commits == ["upsert"] * 4 + ["delete", "upsert"]
        assert corpus.stats()["documents"] == 1_305
        assert corpus._indexes.tantivy.doc_count() == 1_295  # public ones only
        corpus.add([Document(id="m0600", text="public again")])  # and back
        assert corpus.search("public again")[0].source_id == "m0600"


def _failing_privatizing_upsert(monkeypatch: pytest.MonkeyPatch) -> None:
    real = DocumentStore.upsert

    def upsert(
        store: DocumentStore, docs: Sequence[StoredDocument], model: str | None
    ) -> tuple[int, int]:
        if any(not d.is_public for d in docs):
            raise StorageError("database or disk is full (injected)")
        return real(store, docs, model)

    monkeypatch.setattr(DocumentStore, "upsert", upsert)


@pytest.mark.parametrize("reader", ["same engine", "other engine"])
def test_a_failed_store_write_puts_the_withdrawn_documents_back(
    engines: tuple[SearchEngine, SearchEngine],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    reader: str,
) -> None:
    writer, other = engines
    corpus = writer.corpus("c")
    searcher = corpus if reader == "same engine" else other.corpus("c")
    before = [p.source_id for p in searcher.search("alpha", top_k=TOP_K)]
    marker = (tmp_path / "corpora" / "c" / "tantivy.seq").read_text()
    _failing_privatizing_upsert(monkeypatch)
    with pytest.raises(StorageError):
        corpus.add(_privatized())
    monkeypatch.undo()
    assert corpus._indexes.keyword_index_current  # put back, not left to a catch-up
    assert corpus._indexes.tantivy.doc_count() == 25
    assert (tmp_path / "corpora" / "c" / "tantivy.seq").read_text() == marker
    assert [p.source_id for p in searcher.search("alpha", top_k=TOP_K)] == before


def test_a_withdrawal_that_cannot_be_put_back_falls_back_and_catches_up(
    engines: tuple[SearchEngine, SearchEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store write fails and so does putting the documents back (a full disk takes
    both): the keyword index is flagged behind — keyword searches answer from the
    database, which has them — until the next write catches it up from the marker and
    puts them back from ``tantivy.withdrawn``. The
    add's first chunk, stored and still batched, must not be committed on its own then
    (that would mark the index current without the withdrawn documents)."""
    writer, _ = engines
    corpus = writer.corpus("c")
    first_chunk = [Document(id=f"n{i:03d}", text=f"unrelated words tok{i:03d}") for i in range(512)]
    _failing_privatizing_upsert(monkeypatch)
    real_upsert = TantivyIndex.upsert
    refused: list[int] = []

    def no_room_once(index: TantivyIndex, docs: Sequence[SparseDocument]) -> None:
        if not refused:  # the put-back: the first keyword write since the withdrawal
            refused.append(len(docs))
            raise SparseError("no space left on device (injected)")
        real_upsert(index, docs)

    monkeypatch.setattr(TantivyIndex, "upsert", no_room_once)
    with pytest.raises(StorageError):
        corpus.add([*first_chunk, *_privatized()])
    monkeypatch.undo()
    assert refused == [len(PRIVATIZED)]
    assert not corpus._indexes.keyword_index_current
    assert corpus._indexes.tantivy.doc_count() == 20  # the five are out of the index...
    found = {p.source_id for p in corpus.search("alpha", top_k=50)}
    assert set(PRIVATIZED) <= found  # ... not out of the answers
    assert [p.source_id for p in corpus.search("tok007")] == ["n007"]
    corpus.add([Document(id="later", text="an unrelated write")])
    assert corpus._indexes.keyword_index_current
    assert corpus._indexes.tantivy.doc_count() == 25 + 512 + 1
    _assert_first_are_the_strong_ones(corpus)


def test_other_processes_do_not_trust_an_index_whose_withdrawal_failed(
    engines: tuple[SearchEngine, SearchEngine], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Review: the store write failed and so did the put-back, with nothing else in the
    add: the marker did not lag (the store never moved), so a process opening the
    directory read-only ignored the behind flag and answered from an index without five
    public documents. The withdrawn list beside the flag now makes it answer from the
    database, which has them."""
    writer, _ = engines
    corpus = writer.corpus("c")
    _failing_privatizing_upsert(monkeypatch)
    real_upsert = TantivyIndex.upsert

    def no_room(index: TantivyIndex, docs: Sequence[SparseDocument]) -> None:
        raise SparseError("no space left on device (injected)")

    monkeypatch.setattr(TantivyIndex, "upsert", no_room)
    with pytest.raises(StorageError):
        corpus.add(_privatized())
    monkeypatch.setattr(TantivyIndex, "upsert", real_upsert)
    with SearchEngine(tmp_path, read_only=True) as reader:
        follower = reader.corpus("c")
        found = [p.source_id for p in follower.search("alpha", top_k=TOP_K)]
        assert not follower._indexes.keyword_index_current
        assert set(PRIVATIZED) <= set(found[:5])
        corpus.add([Document(id="later", text="an unrelated write")])  # catches up
        _assert_first_are_the_strong_ones(follower)
        assert follower._indexes.keyword_index_current


def _assert_first_are_the_strong_ones(corpus: Corpus) -> None:
    page = corpus.search("alpha", top_k=TOP_K)
    assert {p.source_id for p in page[:5]} == set(PRIVATIZED)
    assert [p.ranks.sparse for p in page] == list(range(1, TOP_K + 1))


_CRASHING_WRITER = """
import os, sys
from engine import Document, SearchEngine
from engine.storage import DocumentStore

real = DocumentStore.upsert

def upsert(store, docs, model):
    if any(not d.is_public for d in docs):
        os._exit(17)  # dies after the withdrawal, before the store write
    return real(store, docs, model)

DocumentStore.upsert = upsert
with SearchEngine(sys.argv[1]) as engine:
    engine.corpus("c").add(
        [Document(id=f"p{i}", text="alpha alpha alpha", access_groups=("staff",)) for i in range(5)]
    )
"""


def _crash_a_writer_after_its_withdrawal(directory: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", _CRASHING_WRITER, str(directory)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 17, done.stderr


@pytest.mark.timeout(180)
def test_a_writer_dead_after_its_withdrawal_leaves_a_list_the_next_holder_puts_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process killed between the withdrawal and its store write: the store still has
    the documents public, the keyword index lacks them. Their ids were written to
    ``tantivy.withdrawn`` first, so the next holder puts them back — a process that stayed
    open, at its next write, and any that opens the directory — and only them: the
    marker never moved back (a review saw a first version lower it to the oldest
    document's write and re-index 50,020 documents of 50,000 after such a crash)."""
    with SearchEngine(tmp_path) as survivor:
        survivor.create_corpus(CorpusConfig(name="c", embedder=None)).add(_public_docs())
        corpus = survivor.corpus("c")
        _assert_first_are_the_strong_ones(corpus)
        _crash_a_writer_after_its_withdrawal(tmp_path)
        # The store still has them public; this process's keyword reader lacks them until
        # a holder puts them back.
        assert corpus.fetch_source("p0").source_id == "p0"
        corpus.add([Document(id="later", text="an unrelated write")])
        _assert_first_are_the_strong_ones(corpus)
        assert corpus._indexes.tantivy.doc_count() == 26
        assert not (tmp_path / "corpora" / "c" / "tantivy.withdrawn").exists()
    # The same, for an engine opened after the crash (the survivor's write repaired the
    # files already, so take the moment before it again: a fresh directory).
    fresh = tmp_path / "fresh"
    with SearchEngine(fresh) as eng:
        eng.create_corpus(CorpusConfig(name="c", embedder=None)).add(_public_docs())
    directory = fresh / "corpora" / "c"
    marker = (directory / "tantivy.seq").read_text()
    _crash_a_writer_after_its_withdrawal(fresh)
    assert (directory / "tantivy.seq").read_text() == marker
    assert (directory / "tantivy.withdrawn").exists()
    # Review: a process opening the directory before any writer does — read-only, so it
    # can never put them back itself — answered from the index without them. No process
    # holds the write lock, so the list is a dead writer's: it answers from the database.
    with SearchEngine(fresh, read_only=True) as reader:
        follower = reader.corpus("c")
        found = [p.source_id for p in follower.search("alpha", top_k=TOP_K)]
        assert set(PRIVATIZED) <= set(found[:5])
        assert not follower._indexes.keyword_index_current
    indexed: list[str] = []
    real_upsert = TantivyIndex.upsert

    def counting(index: TantivyIndex, docs: Sequence[SparseDocument]) -> None:
        indexed.extend(d.source_id for d in docs)
        real_upsert(index, docs)

    monkeypatch.setattr(TantivyIndex, "upsert", counting)
    with SearchEngine(fresh) as eng:
        corpus = eng.corpus("c")
        _assert_first_are_the_strong_ones(corpus)
        assert corpus._indexes.tantivy.doc_count() == 25
    assert sorted(indexed) == PRIVATIZED  # put back, nothing replayed
    assert not (directory / "tantivy.withdrawn").exists()


def test_a_withdrawal_that_cannot_be_noted_leaves_the_index_as_it_was(
    engines: tuple[SearchEngine, SearchEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: with no room to write even the marker, the withdrawal flagged the keyword
    index behind before it had deleted anything — the add was refused anyway, and this
    process answered without its keyword arm until its next write. When the list of ids
    cannot be written, nothing is withdrawn and the index stays current."""
    writer, _ = engines
    corpus = writer.corpus("c")

    def no_room(path: Path, ids: Sequence[str]) -> None:
        raise OSError(28, "No space left on device (injected)")

    monkeypatch.setattr(keyword_keeper, "write_ids", no_room)
    corpus.add(_privatized())
    assert corpus._indexes.keyword_index_current
    assert corpus._indexes.tantivy.doc_count() == 20
    page = corpus.search("alpha", top_k=TOP_K)
    assert not {p.source_id for p in page} & set(PRIVATIZED)
    assert [p.ranks.sparse for p in page] == list(range(1, TOP_K + 1))


@pytest.mark.timeout(120)
def test_the_vector_arm_stops_seeing_them_when_the_store_write_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The vector arm's allow-list was made fresh before each chunk was written, but a
    search while that chunk was embedded and stored cached one that still held its
    documents public, and kept it until the next chunk: the privatized documents held
    places in the vector window, the store check dropped them, and the page's
    ``ranks.dense`` skipped those places. It is made fresh after each write too."""
    before, go = threading.Event(), threading.Event()
    hold = StoreHold()
    real = DocumentStore.upsert

    def upsert(
        store: DocumentStore, docs: Sequence[StoredDocument], model: str | None
    ) -> tuple[int, int]:
        if not before.is_set() and any(not d.is_public for d in docs):
            before.set()  # embedded, about to be stored
            if not go.wait(WAIT_S):
                raise TimeoutError("the test never let the write go on")
        return real(store, docs, model)

    with SearchEngine(tmp_path, embedder_factory=factory_for(WordHashEmbedder())) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="h"))
        corpus.add(_public_docs())
        monkeypatch.setattr(DocumentStore, "upsert", upsert)
        hold.install(monkeypatch)  # wraps the one above: holds after the commit
        public = len(_public_docs()) - len(PRIVATIZED)
        thread, errors = _in_thread(lambda: corpus.add(_privatized()))
        try:
            assert before.wait(WAIT_S)
            # Caches an allow-list: they are still public (the keyword arm has withdrawn
            # them already, so only the vector arm finds them).
            inside = corpus.search("alpha", top_k=len(_public_docs()))
            assert set(PRIVATIZED) <= {p.source_id for p in inside}
            go.set()
            assert hold.committed.wait(WAIT_S)
            page = corpus.search("alpha", top_k=public)
            assert not {p.source_id for p in page} & set(PRIVATIZED)
            assert sorted(p.ranks.dense or 0 for p in page) == list(range(1, public + 1))
        finally:
            go.set()
            hold.release.set()
            thread.join(WAIT_S)
        assert not thread.is_alive() and errors == []
