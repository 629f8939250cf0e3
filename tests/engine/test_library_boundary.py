"""The library boundary is sealed: what leaves the public API is an ``EngineError``.

SQLite's and the file system's exceptions are mapped in one place (``engine.errors.sealed``)
to ``StorageError``, chained to their cause; a programming error is not disguised.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import CorpusConfig, Document, EngineError, SearchEngine, StorageError
from engine.corpus import Corpus
from engine.storage import DocumentStore


@pytest.fixture
def corpus(tmp_path: Path) -> Iterator[Corpus]:
    with SearchEngine(tmp_path / "e") as engine:
        docs = engine.create_corpus(CorpusConfig(name="docs", embedder=None))
        docs.add([Document(id="p1", title="Reset", text="reset your password here")])
        yield docs


def _failing_reads(monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise error

    for name in ("get_many", "count", "count_status", "connection", "headers"):
        monkeypatch.setattr(DocumentStore, name, fail)


@pytest.mark.parametrize(
    "error", [sqlite3.OperationalError("disk I/O error"), sqlite3.DatabaseError("malformed")]
)
def test_store_read_errors_leave_as_storage_errors(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch, error: sqlite3.Error
) -> None:
    """Regression: store reads let ``sqlite3.Error`` escape the public API."""
    _failing_reads(monkeypatch, error)
    calls = {
        "fetch_source": lambda: corpus.fetch_source("p1"),
        "grep": lambda: corpus.grep("password"),
        "stats": corpus.stats,
        "len": lambda: len(corpus),
    }
    for name, call in calls.items():
        with pytest.raises(StorageError) as info:
            call()
        assert info.value.__cause__ is error, name


def test_os_errors_leave_as_storage_errors(corpus: Corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    _failing_reads(monkeypatch, PermissionError(13, "Permission denied"))
    with pytest.raises(StorageError, match="Permission denied"):
        corpus.fetch_source("p1")


def test_a_programming_error_is_not_disguised(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    _failing_reads(monkeypatch, TypeError("a bug"))
    with pytest.raises(TypeError, match="a bug"):
        corpus.fetch_source("p1")


def test_engine_errors_pass_unchanged(corpus: Corpus) -> None:
    with pytest.raises(EngineError) as info:
        corpus.fetch_source("nope")
    assert type(info.value).__name__ == "SourceNotFound"


def test_a_search_over_a_failing_store_raises_a_storage_error(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a user types never makes a search raise; a broken store does, sealed."""
    _failing_reads(monkeypatch, sqlite3.OperationalError("disk I/O error"))
    with pytest.raises(StorageError):
        corpus.search("password")
