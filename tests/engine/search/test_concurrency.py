"""Concurrency: 8 reader threads search while 1 writer adds, updates and deletes; and
two processes (or two engines) sharing one directory (more in
``tests/engine/write/test_processes.py``).

Readers must see 0 errors, and every hit must name a document that existed at some point
during that query (the writer logs, per id, when its ``add`` started and when its
``delete`` returned). Duration: ``TANDEM_CONCURRENCY_S`` (default 5 s; 60 s with
``TANDEM_SOAK=1``). Reader p95 vs single-thread p95 is printed (``-s``) and asserted
(≤ 3×) only under ``TANDEM_SOAK=1``: wall-clock ratios on a shared CI box are noise.
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine import CorpusConfig, Document, SearchEngine, SentenceTransformerEmbedding
from tests.support.fakes import WordHashEmbedder, factory_for
from tests.support.reliability_support import faiss_threads

SOAK = os.environ.get("TANDEM_SOAK") == "1"
DURATION_S = float(os.environ.get("TANDEM_CONCURRENCY_S", "60" if SOAK else "5"))
READERS = 8
ROOT = Path(__file__).resolve().parents[3]
VOCAB = (
    *("printer", "fuser", "paper", "tray", "network", "invoice", "refund", "parcel"),
    *("locker", "password", "reset", "account", "delivery", "order", "shipping", "error"),
)


def _doc(doc_id: str, rng: random.Random, version: int = 0) -> Document:
    words = " ".join(rng.choice(VOCAB) for _ in range(30))
    return Document(id=doc_id, title=f"{rng.choice(VOCAB)} {doc_id}", text=f"{words} v{version}")


@dataclass
class Lifetimes:
    """Per id: [(add started, delete returned or +inf)], written by the single writer."""

    spans: dict[str, list[list[float]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def born(self, doc_id: str, at: float) -> None:
        with self.lock:
            self.spans.setdefault(doc_id, []).append([at, math.inf])

    def died(self, doc_id: str, at: float) -> None:
        with self.lock:
            self.spans[doc_id][-1][1] = at

    def existed(self, doc_id: str, start: float, end: float) -> bool:
        with self.lock:
            return any(b <= end and d >= start for b, d in self.spans.get(doc_id, []))


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SearchEngine]:
    with (
        faiss_threads(1),
        SearchEngine(tmp_path / "engine", embedder_factory=factory_for(WordHashEmbedder())) as e,
    ):
        yield e


@pytest.mark.slow
@pytest.mark.timeout(DURATION_S * 4 + 120)
@pytest.mark.parametrize("kind", ["hybrid", "keyword"])
def test_readers_during_writes_see_no_errors_and_no_phantoms(
    engine: SearchEngine, kind: str
) -> None:
    rng = random.Random(4)
    config = CorpusConfig(
        name=kind, embedder=SentenceTransformerEmbedding(model="fake") if kind == "hybrid" else None
    )
    corpus = engine.create_corpus(config)
    life = Lifetimes()
    base = [_doc(f"base-{i}", rng) for i in range(300)]
    for d in base:
        life.born(d.id, 0.0)
    corpus.add(base)
    queries = [" ".join(rng.sample(VOCAB, 3)) for _ in range(200)]

    single: list[float] = []
    for q in queries:
        t0 = time.perf_counter()
        corpus.search(q, top_k=10)
        single.append(time.perf_counter() - t0)

    stop = threading.Event()
    errors: list[BaseException] = []
    latencies: list[list[float]] = [[] for _ in range(READERS)]
    phantoms: list[str] = []
    writes = {"add": 0, "update": 0, "delete": 0}

    def reader(n: int) -> None:
        local = random.Random(n)
        try:
            while not stop.is_set():
                q = local.choice(queries)
                start = time.monotonic()
                t0 = time.perf_counter()
                hits = corpus.search(q, top_k=local.choice([5, 10, 50]))
                latencies[n].append(time.perf_counter() - t0)
                end = time.monotonic()
                phantoms.extend(
                    h.source_id for h in hits if not life.existed(h.source_id, start, end)
                )
        except BaseException as exc:
            errors.append(exc)

    def writer() -> None:
        local = random.Random(99)
        alive: list[str] = []
        n = 0
        try:
            while not stop.is_set():
                op = local.random()
                if op < 0.5 or len(alive) < 10:
                    batch = [_doc(f"w-{n + i}", local) for i in range(local.randint(1, 8))]
                    n += len(batch)
                    for d in batch:
                        life.born(d.id, time.monotonic())
                    corpus.add(batch)
                    alive += [d.id for d in batch]
                    writes["add"] += len(batch)
                elif op < 0.75:
                    batch = [_doc(i, local, version=n) for i in local.sample(alive, 3)]
                    corpus.add(batch)
                    writes["update"] += len(batch)
                else:
                    gone = local.sample(alive, local.randint(1, 4))
                    corpus.delete(gone)
                    at = time.monotonic()
                    for doc_id in gone:
                        life.died(doc_id, at)
                        alive.remove(doc_id)
                    writes["delete"] += len(gone)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(READERS)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    time.sleep(DURATION_S)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"

    reads = sum(len(x) for x in latencies)
    ratio = _p95([x for xs in latencies for x in xs]) / _p95(single)
    print(
        f"[concurrency {kind}] {DURATION_S:.0f}s: {reads} searches by {READERS} readers, "
        f"writes {writes}, errors {len(errors)}, phantoms {len(phantoms)}, "
        f"p95 single {_p95(single) * 1e3:.2f} ms, p95 concurrent "
        f"{_p95([x for xs in latencies for x in xs]) * 1e3:.2f} ms, ratio {ratio:.2f}"
    )
    assert not errors, repr(errors[:3])
    assert not phantoms, phantoms[:10]
    assert reads > READERS and sum(writes.values()) > 0
    assert len(corpus) == 300 + writes["add"] - writes["delete"]
    if SOAK:
        assert ratio <= 3.0


# -- several openers of one directory -----------------------------------------------------

_HOLDER = """
import sys
from engine import SearchEngine, CorpusConfig, Document
engine = SearchEngine(sys.argv[1])
try:
    corpus = engine.corpus("c")
except KeyError:
    corpus = engine.create_corpus(CorpusConfig(name="c", embedder=None))
corpus.add([Document(id="held", text="written by the holder process")])
print("READY", flush=True)
sys.stdin.readline()
"""

_OPENER = """
import sys
from engine import Document, SearchEngine
with SearchEngine(sys.argv[1]) as engine:
    corpus = engine.corpus("c")
    print("SEES", len(corpus), flush=True)
    corpus.add([Document(id="other", text="written by another opener process")])
"""


def _python(code: str, *args: str, **kwargs: object) -> subprocess.Popen[str]:
    proc: subprocess.Popen[str] = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        **kwargs,  # type: ignore[call-overload]
    )
    return proc


def _readline(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """The child's next stdout line; fails (instead of blocking) after ``timeout_s``."""
    assert proc.stdout is not None
    stream = proc.stdout
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)  # a reader left blocked ends when the child is killed
    assert lines, f"no line from the child within {timeout_s:g} s"
    return lines[0]


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.timeout(120)
def test_a_second_process_shares_the_directory_and_a_killed_holder_harms_nothing(
    tmp_path: Path,
) -> None:
    root = tmp_path / "engine"
    with SearchEngine(root) as first:
        first.create_corpus(CorpusConfig(name="c", embedder=None)).add(
            [Document(id="mine", text="written by the test process")]
        )
        # Another process opens, reads and writes while this one has the directory open.
        other = _python(_OPENER, str(root), stdout=subprocess.PIPE)
        try:
            out, _ = other.communicate(timeout=60)
        finally:
            _kill(other)
        assert other.returncode == 0 and out.startswith("SEES 1"), out
        assert [h.source_id for h in first.corpus("c").search("opener")] == ["other"]
    # A process holding the directory (and, moments before, the write lock) is SIGKILLed:
    # nothing is left locked and nothing acknowledged is lost.
    holder = _python(_HOLDER, str(root), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert _readline(holder, 60).strip() == "READY"
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        _kill(holder)  # never left holding the directory when the test failed
    with SearchEngine(root, busy_timeout=5.0) as again:
        corpus = again.corpus("c")
        corpus.add([Document(id="after", text="written after the kill by this process")])
        assert {h.source_id for h in corpus.search("written process", top_k=10)} == {
            "mine",
            "held",
            "other",
            "after",
        }
        assert len(corpus) == 4


@pytest.mark.timeout(120)
def test_concurrent_writer_threads_are_serialised(tmp_path: Path) -> None:
    with (
        faiss_threads(1),
        SearchEngine(tmp_path / "e", embedder_factory=factory_for(WordHashEmbedder())) as engine,
    ):
        corpus = engine.create_corpus(
            CorpusConfig(name="c", embedder=SentenceTransformerEmbedding(model="fake"))
        )
        errors: list[BaseException] = []

        def write(n: int) -> None:
            rng = random.Random(n)
            try:
                for b in range(15):
                    corpus.add([_doc(f"t{n}-{b}-{i}", rng) for i in range(5)])
                    if b % 5 == 4:
                        corpus.delete([f"t{n}-{b}-0"])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=100)
        assert not errors, errors[:3]
        expected = 4 * (15 * 5 - 3)
        assert len(corpus) == expected
        assert corpus.stats()["vectors"] == expected
        assert corpus._indexes.tantivy.doc_count() == expected
