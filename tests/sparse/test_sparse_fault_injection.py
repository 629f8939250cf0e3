"""Fault injection: a broken index degrades to [] / the next backend and loses nothing."""

from __future__ import annotations

import random
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest
import tantivy

from sparse.contracts import (
    AccessContext,
    EvidenceSource,
    RetrievalQuery,
    SearchBackend,
    SparseDocument,
)
from sparse.errors import SparseError, SparseIndexCorruptError, SparseIndexLockedError
from sparse.facade import KeywordSearchFacade
from sparse.tantivy_backend import TantivyBackend
from sparse.tantivy_index import TantivyIndex
from sparse.tantivy_schema import build_schema

DOCS = [
    SparseDocument(f"d{i}", f"Walrus {i}", "Walruses live in the Arctic.", url=f"/d{i}")
    for i in range(5)
]


class Fallback:
    """A priority-0 stand-in for the database fallback: always available, fixed answer."""

    name = "fallback"
    priority = 0

    def __init__(self) -> None:
        self.calls = 0

    def is_available(self) -> bool:
        return True

    def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
        self.calls += 1
        return [EvidenceSource("fb", "From fallback", "/fb", "")]


@pytest.fixture
def index(tmp_path: Path) -> TantivyIndex:
    built = TantivyIndex(tmp_path / "index")
    built.upsert(DOCS)
    return built


def _facades(index: TantivyIndex) -> tuple[KeywordSearchFacade, KeywordSearchFacade, Fallback]:
    fallback = Fallback()
    backends: list[SearchBackend] = [TantivyBackend(index), fallback]
    return (
        KeywordSearchFacade.full_cascade(backends),
        KeywordSearchFacade.index_backed(backends),
        fallback,
    )


def _assert_degraded(index: TantivyIndex) -> None:
    full, arm, fallback = _facades(index)
    assert index.is_available() is False
    assert arm.is_available() is False
    assert arm.search("walrus", 10) == []
    assert [hit.source_id for hit in full.search("walrus", 10)] == ["fb"]
    assert fallback.calls == 1


def _assert_rebuild_recovers(index: TantivyIndex) -> None:
    index.clear()
    index.upsert(DOCS)
    _, arm, _ = _facades(index)
    assert arm.is_available() is True
    assert len(arm.search("walrus", 10)) == len(DOCS)


def test_index_directory_deleted_under_an_open_index(index: TantivyIndex) -> None:
    assert index.doc_count() == len(DOCS)
    shutil.rmtree(index.path)
    _assert_degraded(index)
    with pytest.raises(SparseIndexCorruptError):
        index.upsert(DOCS)
    _assert_rebuild_recovers(index)


def test_corrupt_meta_json(index: TantivyIndex) -> None:
    index.close()
    (index.path / "meta.json").write_text("{ this is not json")
    reopened = TantivyIndex(index.path)
    _assert_degraded(reopened)
    with pytest.raises(SparseIndexCorruptError):
        reopened.upsert(DOCS)
    assert isinstance(SparseIndexCorruptError("x"), SparseError)
    _assert_rebuild_recovers(reopened)


def test_corrupt_segment_files(index: TantivyIndex) -> None:
    index.close()
    for path in index.path.iterdir():
        if path.is_file() and path.name != "meta.json" and not path.name.startswith("."):
            path.write_bytes(b"\x00garbage" * 8)
    reopened = TantivyIndex(index.path)
    _assert_degraded(reopened)
    with pytest.raises(SparseIndexCorruptError):
        reopened.upsert(DOCS)
    _assert_rebuild_recovers(reopened)


def test_a_foreign_directory_is_never_overwritten(tmp_path: Path) -> None:
    foreign = tmp_path / "not-an-index"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    index = TantivyIndex(foreign)
    assert index.is_available() is False
    with pytest.raises(SparseIndexCorruptError):
        index.upsert(DOCS)
    assert (foreign / "precious.txt").read_text() == "keep me"


def test_a_file_where_the_directory_should_be(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    _assert_degraded(TantivyIndex(tmp_path / "file"))


def test_writer_lock_held_elsewhere(index: TantivyIndex) -> None:
    other = tantivy.Index(build_schema(), str(index.path), reuse=True)
    holder = other.writer(15_000_000, 1)  # a second writer on the same directory
    try:
        with pytest.raises(SparseIndexLockedError):
            index.upsert([SparseDocument("new", "New walrus", "walrus")])
        with pytest.raises(SparseIndexLockedError):
            index.delete(["d0"])
        _, arm, _ = _facades(index)
        # Readers are not blocked by a writer: search keeps answering, nothing is lost.
        assert len(arm.search("walrus", 10)) == len(DOCS)
    finally:
        holder.rollback()
        holder.wait_merging_threads()
    index.upsert([SparseDocument("new", "New walrus", "walrus")])
    assert index.doc_count() == len(DOCS) + 1


def test_a_backend_that_raises_is_contained(index: TantivyIndex) -> None:
    class Exploding:
        name = "exploding"
        priority = 50

        def is_available(self) -> bool:
            return True

        def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
            raise TimeoutError("remote engine timed out")

    backends: Sequence[SearchBackend] = [Exploding(), TantivyBackend(index)]
    arm = KeywordSearchFacade.index_backed(backends)
    assert len(arm.search("walrus", 10)) == len(DOCS)
    alone = KeywordSearchFacade.full_cascade([Exploding()])
    assert alone.search("walrus", 10) == []


class _BuggyBackend:
    """An index-backed backend whose search fails with a message quoting the query."""

    name = "buggy"
    priority = 10

    def is_available(self) -> bool:
        return True

    def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
        return _explode_with(query.text)


def _explode_with(text: str) -> list[EvidenceSource]:
    raise ValueError(f"cannot parse {text!r}")


def test_a_contained_failure_logs_its_frames_at_debug_never_the_query(
    caplog: pytest.LogCaptureFixture,
) -> None:
    facade = KeywordSearchFacade.index_backed([_BuggyBackend()])
    secret = "walrus zzsecretzz"
    with caplog.at_level("DEBUG", logger="sparse"):
        assert facade.search(secret, 5) == []
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "_explode_with" in logged  # the frames: where it failed
    assert "ValueError" in logged
    assert "zzsecretzz" not in logged  # the message, which quotes the query, is not


def _flip_bytes(path: Path, seed: int) -> None:
    data = bytearray(path.read_bytes())
    rng = random.Random(seed)
    for _ in range(16):
        data[rng.randrange(len(data))] ^= 0xFF
    path.write_bytes(data)


_PANIC_DOCS = [
    SparseDocument(f"d{i}", f"title {i} password", f"body text {i} " + "lorem ipsum " * (i % 7))
    for i in range(300)
]


@pytest.mark.parametrize("seed", range(20))
def test_a_segment_damaged_so_that_tantivy_panics_is_contained(tmp_path: Path, seed: int) -> None:
    """Regression: tantivy panics (pyo3's PanicException, a BaseException) when a query
    reads a damaged term dictionary of an index that opened fine — 3 of these 20
    corruptions did with tantivy 0.27 — and the panic went through ``except Exception``
    out of the facade, past the fallback backend."""
    index = TantivyIndex(tmp_path / "index")
    index.upsert(_PANIC_DOCS)
    (term_file,) = index.path.glob("*.term")
    index.close()
    _flip_bytes(term_file, seed)
    full, arm, _ = _facades(TantivyIndex(index.path))
    for facade in (full, arm):  # each answers: its hits, the fallback's, or []
        assert isinstance(facade.search("password body lorem", 50), list)
        assert isinstance(facade.excerpt_terms("password lorem"), list)
        facade.term_statistics("password lorem")  # None or statistics, never a raise


class PanicException(BaseException):
    """What pyo3 raises for a Rust panic, as far as a boundary can tell (name, module)."""


PanicException.__module__ = "pyo3_runtime"


def test_a_native_panic_falls_back_but_an_interrupt_goes_through() -> None:
    class Panicking:
        name = "panicking"
        priority = 50

        def __init__(self, raised: BaseException) -> None:
            self.raised = raised

        def is_available(self) -> bool:
            return True

        def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
            raise self.raised

    fallback = Fallback()
    panicking = KeywordSearchFacade.full_cascade([Panicking(PanicException("boom")), fallback])
    assert [hit.source_id for hit in panicking.search("walrus", 10)] == ["fb"]
    assert KeywordSearchFacade.index_backed([Panicking(PanicException())]).search("w x", 5) == []
    interrupted = KeywordSearchFacade.full_cascade([Panicking(KeyboardInterrupt()), fallback])
    with pytest.raises(KeyboardInterrupt):
        interrupted.search("walrus", 10)
