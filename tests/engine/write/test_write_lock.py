"""The write lock: writers wait a bounded time (then ``EngineBusy``), readers never wait,
the lock dies with its process, and it is taken on the local disk only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from engine import (
    CorpusConfig,
    Document,
    EngineBusy,
    EngineError,
    EngineLocked,
    SearchEngine,
    SentenceTransformerEmbedding,
)
from engine.write.lock import WriteLock, network_filesystem
from tests.support.fakes import WordHashEmbedder, factory_for
from tests.support.reliability_support import store_snapshot

ROOT = Path(__file__).resolve().parents[3]

# Holds the corpus's write lock for as long as its embedder sleeps (until killed, or
# until a line arrives on stdin).
_HOLDER = """
import sys, time
from engine import CorpusConfig, Document, SearchEngine, SentenceTransformerEmbedding
from tests.support.fakes import WordHashEmbedder, factory_for

class Slow(WordHashEmbedder):
    def embed(self, texts):
        print("EMBEDDING", flush=True)
        sys.stdin.readline()
        return super().embed(texts)

engine = SearchEngine(sys.argv[1], embedder_factory=factory_for(Slow()))
corpus = engine.corpus("c")
corpus.add([Document(id="from-holder", text="written by the holder process")])
print("DONE", flush=True)
engine.close()
"""


def _holder(root: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "EMBEDDING"  # inside add: the lock is held
    return proc


def _engine(root: Path, **kwargs: object) -> SearchEngine:
    return SearchEngine(root, embedder_factory=factory_for(WordHashEmbedder()), **kwargs)  # type: ignore[arg-type]


def _corpus(root: Path) -> None:
    with _engine(root) as engine:
        corpus = engine.create_corpus(
            CorpusConfig(name="c", embedder=SentenceTransformerEmbedding(model="fake"))
        )
        corpus.add([Document(id="first", text="the first document, written before")])


@pytest.mark.timeout(180)
def test_a_busy_writer_makes_others_wait_then_engine_busy_and_reads_go_on(
    tmp_path: Path,
) -> None:
    root = tmp_path / "engine"
    _corpus(root)
    holder = _holder(root)
    try:
        with _engine(root, busy_timeout=0.2) as engine:
            corpus = engine.corpus("c")
            before = store_snapshot(root / "corpora" / "c")
            # Reads answer while the other process holds the write lock.
            assert [h.source_id for h in corpus.search("first document")] == ["first"]
            assert corpus.fetch_source("first").text.startswith("the first")
            with pytest.raises(EngineBusy) as raised:
                corpus.add([Document(id="mine", text="written by the test")])
            assert isinstance(raised.value, EngineLocked)  # old handlers still catch it
            assert isinstance(raised.value, EngineError)
            with pytest.raises(EngineBusy):
                corpus.delete(["first"])
            with pytest.raises(EngineBusy):
                corpus.flush()
            assert store_snapshot(root / "corpora" / "c") == before  # nothing half-written
            assert holder.stdin is not None
            holder.stdin.write("go on\n")
            holder.stdin.flush()
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "DONE"
            holder.wait(timeout=60)
            corpus.add([Document(id="mine", text="written by the test")])
            assert {"mine", "from-holder"} <= {h.source_id for h in corpus.search("written")}
    finally:
        holder.kill()
        holder.wait(timeout=30)


@pytest.mark.timeout(180)
def test_the_lock_dies_with_its_process(tmp_path: Path) -> None:
    root = tmp_path / "engine"
    _corpus(root)
    holder = _holder(root)
    with _engine(root, busy_timeout=60.0) as engine:
        corpus = engine.corpus("c")
        holder.send_signal(signal.SIGKILL)  # mid-write, lock held
        holder.wait(timeout=30)
        corpus.add([Document(id="after", text="written after the kill")])
        assert [h.source_id for h in corpus.search("after the kill")][:1] == ["after"]
        assert {"first", "after"} <= {h.source_id for h in corpus.search("written first")}


@pytest.mark.timeout(120)
def test_two_engines_in_one_process_share_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "engine"
    _corpus(root)
    entered = threading.Event()
    release = threading.Event()

    class Slow(WordHashEmbedder):
        def embed(self, texts: object) -> object:  # type: ignore[override]
            entered.set()
            release.wait(timeout=60)
            return super().embed(texts)  # type: ignore[arg-type]

    with (
        SearchEngine(root, embedder_factory=factory_for(Slow())) as first,
        _engine(root, busy_timeout=0.1) as second,
    ):
        writer = threading.Thread(
            target=first.corpus("c").add, args=([Document(id="slow", text="slow write")],)
        )
        writer.start()
        assert entered.wait(timeout=60)
        other = second.corpus("c")
        assert [h.source_id for h in other.search("first document")] == ["first"]
        with pytest.raises(EngineBusy):
            other.add([Document(id="x", text="blocked")])
        release.set()
        writer.join(timeout=60)
        assert [h.source_id for h in other.search("slow write")][:1] == ["slow"]
        other.add([Document(id="x", text="now it goes through")])
        assert [h.source_id for h in first.corpus("c").search("goes through")][:1] == ["x"]


def test_busy_timeout_is_validated(tmp_path: Path) -> None:
    for bad in (-1, float("nan"), "5", True):
        with pytest.raises(ValueError):
            SearchEngine(tmp_path, busy_timeout=bad)  # type: ignore[arg-type]


def test_write_lock_is_reentrant_and_excludes_another_open_file(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    a, b = WriteLock(path), WriteLock(path)
    assert a.acquire(0) and a.acquire(0) and a.held
    assert not b.acquire(0.05)  # another open file: excluded, even in this process
    a.release()
    assert not b.acquire(0)  # still held once
    a.release()
    assert b.acquire(0)
    b.release()
    a.close()
    b.close()


def test_network_filesystems_are_recognised(tmp_path: Path) -> None:
    assert network_filesystem(tmp_path) is None  # the test's tmp dir is on a local disk
    mountinfo = (
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "40 22 0:35 / /mnt/share rw,relatime shared:20 - nfs4 srv:/export rw\n"
    )
    assert network_filesystem(Path("/mnt/share/tandem"), mountinfo) == "nfs4"
    assert network_filesystem(Path("/mnt/shared"), mountinfo) is None
    assert network_filesystem(Path("/home/x"), mountinfo) is None
