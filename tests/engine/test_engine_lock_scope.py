"""Creating or dropping a corpus waits for other processes without stalling this one.

A create waits for the directory's lock (another engine creating or dropping), a drop
also for the corpus's writer — each up to ``busy_timeout``. A review found both waiting
while holding the engine's in-process lock, which every ``SearchEngine.corpus`` call
takes: a server's searches, fetches and metrics of *other* corpora stalled for the whole
wait (a hybrid search answered 503 after its 10 s budget). Each test holds the lock a
create or drop waits for, starts it on a thread, and reads another corpus meanwhile; the
read must finish while the create or drop is still waiting (no clock involved).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import CorpusConfig, CorpusNotFound, Document, SearchEngine
from engine import engine as engine_module
from engine.write.lock import LOCK_FILE, WriteLock

JOIN_S = 60.0  # generous: a read that takes this long is the stall under test


@pytest.fixture
def eng(tmp_path: Path) -> Iterator[SearchEngine]:
    with SearchEngine(tmp_path, busy_timeout=120.0) as engine:
        for name in ("busy", "other"):
            engine.create_corpus(CorpusConfig(name=name, embedder=None)).add(
                [Document(id="d1", text=f"words of {name}")]
            )
        yield engine


def _started(target: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def _announcing_drops(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """An event set when a drop starts waiting for the corpus's writer."""
    marking = threading.Event()
    real_mark = engine_module.mark_dropped

    def announced(*args: object, **kwargs: object) -> None:
        marking.set()
        real_mark(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module, "mark_dropped", announced)
    return marking


def _read_other(eng: SearchEngine) -> list[str]:
    corpus = eng.corpus("other")
    return [p.source_id for p in corpus.search("words", top_k=3)]


def _reads_while_waiting(eng: SearchEngine, waiting: threading.Thread) -> None:
    reader, errors = _started(lambda: _read_other(eng))
    reader.join(JOIN_S)
    assert not reader.is_alive(), "reading another corpus waited for the create/drop"
    assert not errors
    assert waiting.is_alive()  # ... which is still waiting: the read did not wait


def test_a_drop_waiting_for_the_corpus_writer_does_not_stall_other_corpora(
    eng: SearchEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marking = _announcing_drops(monkeypatch)
    writer = WriteLock(tmp_path / "corpora" / "busy" / LOCK_FILE)  # another process's write
    assert writer.acquire(5.0)
    try:
        dropper, errors = _started(lambda: eng.drop_corpus("busy"))
        assert marking.wait(JOIN_S)
        _reads_while_waiting(eng, dropper)
    finally:
        writer.release()
        writer.close()
    dropper.join(JOIN_S)
    assert not dropper.is_alive() and not errors
    with pytest.raises(CorpusNotFound):
        eng.corpus("busy")
    assert _read_other(eng) == ["d1"]


def test_a_create_waiting_for_the_directory_lock_does_not_stall_other_corpora(
    eng: SearchEngine, tmp_path: Path
) -> None:
    other_engine = WriteLock(tmp_path / ".lock")  # another engine creating or dropping
    assert other_engine.acquire(5.0)
    try:
        creator, errors = _started(
            lambda: eng.create_corpus(CorpusConfig(name="new", embedder=None))
        )
        _reads_while_waiting(eng, creator)
    finally:
        other_engine.release()
        other_engine.close()
    creator.join(JOIN_S)
    assert not creator.is_alive() and not errors
    assert eng.corpus("new").search("anything") == []


def _closing(
    eng: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Thread, list[BaseException]]:
    """``eng.close()`` started on a thread, returned once it is past its first steps."""
    closing = threading.Event()
    real_close = eng._health_checks.close

    def announced_close() -> None:  # one of close's first steps
        real_close()
        closing.set()

    monkeypatch.setattr(eng._health_checks, "close", announced_close)
    closer, errors = _started(eng.close)
    assert closing.wait(JOIN_S)
    return closer, errors


def _closing_while_waiting(
    eng: SearchEngine, monkeypatch: pytest.MonkeyPatch, held: WriteLock, waiting: threading.Thread
) -> None:
    """Close ``eng`` while ``waiting`` (a create or drop) waits for ``held``; then let
    ``held`` go: both must finish (a review found them waiting for each other for good —
    close held the engine's lock while closing the root's, whose holder needed it)."""
    closer, close_errors = _closing(eng, monkeypatch)
    held.release()
    held.close()
    waiting.join(JOIN_S)
    closer.join(JOIN_S)
    assert not waiting.is_alive() and not closer.is_alive(), "create/drop and close deadlocked"
    assert not close_errors


def test_closing_while_a_drop_waits_for_the_corpus_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng = SearchEngine(tmp_path, busy_timeout=120.0)
    eng.create_corpus(CorpusConfig(name="busy", embedder=None))
    marking = _announcing_drops(monkeypatch)
    writer = WriteLock(tmp_path / "corpora" / "busy" / LOCK_FILE)
    assert writer.acquire(5.0)
    dropper, _ = _started(lambda: eng.drop_corpus("busy"))
    assert marking.wait(JOIN_S)
    _closing_while_waiting(eng, monkeypatch, writer, dropper)


def test_closing_while_a_create_waits_for_the_directory_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    eng = SearchEngine(tmp_path, busy_timeout=120.0)
    other_engine = WriteLock(tmp_path / ".lock")
    assert other_engine.acquire(5.0)
    root = eng._engine_lock
    assert root is not None
    waiting_for_flock = threading.Event()
    real_flock = root._flock

    def announced_flock(*args: Any) -> bool:
        waiting_for_flock.set()  # called holding the root lock's mutex
        return real_flock(*args)

    monkeypatch.setattr(root, "_flock", announced_flock)
    creator, errors = _started(lambda: eng.create_corpus(CorpusConfig(name="new", embedder=None)))
    assert waiting_for_flock.wait(JOIN_S)
    _closing_while_waiting(eng, monkeypatch, other_engine, creator)
    assert [type(e).__name__ for e in errors] == ["InvalidArgument"]  # refused: closing
    assert not (tmp_path / "corpora" / "new").exists()  # and nothing written


def test_a_corpus_call_that_waited_out_a_close_opens_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: ``corpus()`` checked the engine open, then waited for its lock while a
    close ran, then opened the corpus into the closed engine — left open for good."""
    eng = SearchEngine(tmp_path)
    first = eng.create_corpus(CorpusConfig(name="a", embedder=None))
    first.close()
    past_the_check = threading.Event()
    real_dir = eng._corpus_dir

    def announced_dir(name: str) -> Path:
        past_the_check.set()
        return real_dir(name)

    monkeypatch.setattr(eng, "_corpus_dir", announced_dir)
    with eng._lock:  # a close running: it holds the lock until the engine is closed
        opener, errors = _started(lambda: eng.corpus("a"))
        assert past_the_check.wait(JOIN_S)
        eng._closed = True
    opener.join(JOIN_S)
    assert [type(e).__name__ for e in errors] == ["InvalidArgument"]
    assert eng._corpora == {"a": first}  # no new object opened into the closed engine
    eng._closed = False
    eng.close()


def test_a_create_committing_when_close_begins_finishes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: a create past its closing check, writing its config (the commit point),
    then raised "closed" — the corpus existed, the caller was told it did not. Close now
    waits for it."""
    eng = SearchEngine(tmp_path)
    writing, go = threading.Event(), threading.Event()
    real_save = engine_module.save_config

    def held_save(*args: Any) -> None:
        writing.set()
        assert go.wait(JOIN_S)
        real_save(*args)

    monkeypatch.setattr(engine_module, "save_config", held_save)
    created: list[object] = []
    creator, errors = _started(
        lambda: created.append(eng.create_corpus(CorpusConfig(name="b", embedder=None)))
    )
    assert writing.wait(JOIN_S)
    closer, close_errors = _closing(eng, monkeypatch)
    go.set()
    creator.join(JOIN_S)
    closer.join(JOIN_S)
    assert not errors and not close_errors and len(created) == 1
    with SearchEngine(tmp_path) as again:
        assert again.list_corpora() == ["b"]


def test_a_create_waiting_while_close_holds_the_root_lock_is_told_closing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: a create that waited for the root lock while a close held it and closed it
    got a StorageError (the closed lock's OSError, taken for a disk failure)."""
    eng = SearchEngine(tmp_path)
    root = eng._engine_lock
    assert root is not None
    asking = threading.Event()
    real_acquire = root.acquire

    def announced_acquire(*args: Any) -> bool:
        asking.set()
        return real_acquire(*args)

    monkeypatch.setattr(root, "acquire", announced_acquire)
    with root.mutex:  # as close() holds it
        creator, errors = _started(lambda: eng.create_corpus(CorpusConfig(name="c", embedder=None)))
        assert asking.wait(JOIN_S)
        eng._closing = True
        root.close()
    creator.join(JOIN_S)
    assert [f"{type(e).__name__}: {e}" for e in errors] == [
        "InvalidArgument: this SearchEngine is closing"
    ]
    assert not (tmp_path / "corpora" / "c").exists()
    eng.close()
