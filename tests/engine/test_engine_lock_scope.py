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
    marking = threading.Event()
    real_mark = engine_module.mark_dropped

    def announced(*args: object, **kwargs: object) -> None:
        marking.set()
        real_mark(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(engine_module, "mark_dropped", announced)
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
