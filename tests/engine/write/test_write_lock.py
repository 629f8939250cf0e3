"""The write lock: writers wait a bounded time (then ``EngineBusy``), readers never wait,
the lock dies with its process, and it is taken on the local disk only."""

from __future__ import annotations

import contextlib
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
            # A drop refused for the lock leaves the open corpus whole (it was discarded
            # before the wait: "was dropped" on every later call, the same object kept).
            with pytest.raises(EngineBusy):
                engine.drop_corpus("c")
            assert engine.list_corpora() == ["c"] and engine.corpus("c") is corpus
            assert [h.source_id for h in corpus.search("first document")] == ["first"]
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


# Holds a lock, forks a child that only sleeps (a worker pool, a pre-fork server), prints
# the child's pid, then waits to be killed. "write": a thread is inside a corpus write
# while the main thread forks through multiprocessing's "fork" context; "root": the
# forking thread itself holds the engine root's lock, and forks with os.fork.
_FORKING_HOLDER = """
import multiprocessing, os, sys, threading, time
from engine import Document, SearchEngine
from engine.write.lock import WriteLock
from tests.support.fakes import WordHashEmbedder, factory_for

root, mode = sys.argv[1], sys.argv[2]
if mode == "write":
    inside = threading.Event()

    class Slow(WordHashEmbedder):
        def embed(self, texts):
            inside.set()
            time.sleep(600)

    engine = SearchEngine(root, embedder_factory=factory_for(Slow()))
    corpus = engine.corpus("c")
    writer = threading.Thread(
        target=corpus.add, args=([Document(id="never", text="never written")],), daemon=True
    )
    writer.start()
    assert inside.wait(60)
    helper = multiprocessing.get_context("fork").Process(target=time.sleep, args=(600,))
    helper.start()
    pid = helper.pid
else:
    lock = WriteLock(__import__("pathlib").Path(root) / ".lock")
    assert lock.acquire(0)
    pid = os.fork()
    if pid == 0:
        time.sleep(600)
        os._exit(0)
print("CHILD", pid, flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("mode", ["write", "root"])
def test_a_child_forked_while_the_lock_is_held_does_not_keep_it_after_a_kill(
    tmp_path: Path, mode: str
) -> None:
    root = tmp_path / "engine"
    _corpus(root)
    holder = subprocess.Popen(
        [sys.executable, "-c", _FORKING_HOLDER, str(root), mode],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    child = None
    try:
        assert holder.stdout is not None
        word, pid = holder.stdout.readline().split()
        assert word == "CHILD"
        child = int(pid)
        # The holder has the lock.
        with _engine(root, busy_timeout=0.1) as engine, pytest.raises(EngineBusy):
            if mode == "write":
                engine.corpus("c").add([Document(id="early", text="too early")])
            else:
                engine.create_corpus(CorpusConfig(name="early", embedder=None))
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
        # The forked child lives on; the lock died with the holder all the same.
        with _engine(root, busy_timeout=30.0) as engine:
            if mode == "write":
                engine.corpus("c").add([Document(id="after", text="written after the kill")])
                assert [h.source_id for h in engine.corpus("c").search("after the kill")][:1] == [
                    "after"
                ]
            else:
                engine.create_corpus(CorpusConfig(name="after", embedder=None))
                assert "after" in engine.list_corpora()
        assert _alive(child)
    finally:
        holder.kill()
        holder.wait(timeout=60)
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


def _in_child(work: object) -> None:
    """Runs ``work()`` in this forked child and leaves: exit status 0 if it returned."""
    status = 1
    try:
        work()  # type: ignore[operator]
        status = 0
    finally:
        os._exit(status)


def _exit_status(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.timeout(120)
def test_a_forked_child_takes_the_lock_on_its_own_after_another_thread_released_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "lock"
    lock, other = WriteLock(path), WriteLock(path)
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock.holding(0) as got:
            assert got
            taken.set()
            done.wait(timeout=60)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(timeout=60)
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()

    def child() -> None:
        assert not lock.held  # the holding thread did not come along
        assert not lock.acquire(0.05)  # a descriptor of its own: the parent's excludes it
        os.write(to_parent_w, b"1")
        assert os.read(to_child_r, 1) == b"2"  # the parent released
        assert lock.acquire(30)
        os.write(to_parent_w, b"3")
        assert os.read(to_child_r, 1) == b"4"
        lock.release()
        assert lock.acquire(30)  # again: the child's lock is an ordinary lock
        lock.release()

    pid = os.fork()
    if pid == 0:
        _in_child(child)
    os.close(to_child_r)  # the child's ends: a read sees the child's exit
    os.close(to_parent_w)
    try:
        assert os.read(to_parent_r, 1) == b"1"
        assert not other.acquire(0)  # the child's close left the parent's lock held
        done.set()
        holder.join(timeout=60)
        os.write(to_child_w, b"2")
        assert os.read(to_parent_r, 1) == b"3"
        assert not other.acquire(0)  # the child holds it now
        assert not lock.held
        os.write(to_child_w, b"4")
        assert _exit_status(pid) == 0
        pid = 0
        assert lock.acquire(5)
        lock.release()
        assert other.acquire(5)
        other.release()
    finally:
        done.set()
        holder.join(timeout=60)
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(to_child_w)
        os.close(to_parent_r)
        lock.close()
        other.close()


@pytest.mark.timeout(120)
def test_a_child_forked_inside_the_lock_neither_shares_nor_releases_it(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    lock, other = WriteLock(path), WriteLock(path)
    done_r, done_w = os.pipe()

    def child() -> None:
        assert lock.held  # the forking thread's acquire, still to be released
        assert not lock.acquire(0.05)  # but the parent's flock is not the child's
        lock.release()  # balanced; takes nothing from the parent
        assert not lock.held
        os.write(done_w, b"1")

    assert lock.acquire(0)
    try:
        pid = os.fork()
        if pid == 0:
            _in_child(child)
        os.close(done_w)  # the child's end: a read sees the child's exit
        assert os.read(done_r, 1) == b"1"
        assert _exit_status(pid) == 0
        assert lock.held
        assert not other.acquire(0)  # still the parent's
    finally:
        lock.release()
        os.close(done_r)
    assert other.acquire(5)
    other.release()
    lock.close()
    other.close()


def test_network_filesystems_are_recognised(tmp_path: Path) -> None:
    assert network_filesystem(tmp_path) is None  # the test's tmp dir is on a local disk
    mountinfo = (
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "40 22 0:35 / /mnt/share rw,relatime shared:20 - nfs4 srv:/export rw\n"
    )
    assert network_filesystem(Path("/mnt/share/tandem"), mountinfo) == "nfs4"
    assert network_filesystem(Path("/mnt/shared"), mountinfo) is None
    assert network_filesystem(Path("/home/x"), mountinfo) is None


@pytest.mark.timeout(180)
def test_a_child_forked_during_another_threads_write_writes_follows_and_searches(
    tmp_path: Path,
) -> None:
    """Regression: a child forked while another thread was inside a write inherited that
    write's state beside the lock (its depth, "this process is the writer"), so its own
    write never released the lock (every other process then got EngineBusy) and its reads
    never followed another writer; and a child of a process that had run one hybrid
    search waited for ever on the keyword arm's thread pool, whose threads stayed
    behind."""
    fake = WordHashEmbedder()
    engine = SearchEngine(tmp_path, busy_timeout=30, embedder_factory=factory_for(fake))
    corpus = engine.create_corpus(CorpusConfig(name="c", embedder="word-hash"))
    corpus.add([Document(id=f"d{i}", text=f"alpha words {i}") for i in range(20)])
    assert corpus.search("alpha words 3")[0].source_id == "d3"  # the pool now has a thread
    inside, leave = threading.Event(), threading.Event()

    def write() -> None:
        with corpus._sync.writing():
            inside.set()
            assert leave.wait(60)

    writer = threading.Thread(target=write)
    writer.start()
    assert inside.wait(60)
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answers on the pipe, never returns into pytest
        code = 1
        try:
            os.close(to_child_w)
            os.close(to_parent_r)
            found = corpus.search("alpha words 5")[0].source_id  # the pool, afresh
            corpus.add([Document(id="child", text="written by the child")])
            os.write(to_parent_w, f"{found}\n".encode())
            assert os.read(to_child_r, 1) == b"1"  # the parent wrote meanwhile
            later = [h.source_id for h in corpus.search("written by the parent")]
            os.write(to_parent_w, f"{later[0] if later else '-'}\n".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(to_child_r)
    os.close(to_parent_w)
    try:
        leave.set()
        writer.join(60)
        with os.fdopen(to_parent_r, "rb") as answers:
            assert answers.readline().strip() == b"d5"
            # The child still runs; its write must have released the lock.
            corpus.add([Document(id="parent", text="written by the parent")])
            os.write(to_child_w, b"1")
            assert answers.readline().strip() == b"parent"
        _, status = os.waitpid(pid, 0)
        assert status == 0
        assert corpus.fetch_source("child").text == "written by the child"
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        os.close(to_child_w)
        engine.close()
