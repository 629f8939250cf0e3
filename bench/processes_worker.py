"""What each spawned process of ``python -m bench processes`` runs (a public-API client).

Every function opens the engine directory itself, as an independent application process
would, warms up, waits at a shared barrier and then measures; results go back through a
queue. Clock: ``time.monotonic()``, one system-wide clock on Linux, so visibility lag can
be taken across processes.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

from engine import Document, SearchEngine

WARMUP_SEARCHES = 30


@dataclass(frozen=True, slots=True)
class LoadJob:
    root: str
    corpus: str
    queries: tuple[str, ...]
    threads: int
    duration_s: float
    seed: int


def search_load(job: LoadJob, barrier: Any, results: Any) -> None:
    """``job.threads`` client threads search back to back for ``duration_s`` after the
    barrier; sends ``{"count": n, "latencies": [s, ...], "cpu_s": process CPU seconds}``
    (CPU time does not depend on how busy the machine is; wall-clock time does)."""
    with SearchEngine(job.root) as engine:
        corpus = engine.corpus(job.corpus)
        for q in job.queries[:WARMUP_SEARCHES]:
            corpus.search(q)
        latencies: list[list[float]] = [[] for _ in range(job.threads)]
        barrier.wait()
        deadline = time.monotonic() + job.duration_s

        def client(n: int) -> None:
            rng = random.Random(job.seed * 100 + n)
            mine = latencies[n]
            while time.monotonic() < deadline:
                query = rng.choice(job.queries)
                started = time.perf_counter()
                corpus.search(query)
                mine.append(time.perf_counter() - started)

        threads = [threading.Thread(target=client, args=(n,)) for n in range(job.threads)]
        cpu_started = time.process_time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cpu_s = time.process_time() - cpu_started
    flat = [x for xs in latencies for x in xs]
    results.put({"count": len(flat), "latencies": flat, "cpu_s": cpu_s})


@dataclass(frozen=True, slots=True)
class LagJob:
    root: str
    corpus: str
    documents: int
    pause_s: float
    seed: int


def _token(n: int, seed: int) -> str:
    return f"zvisible{seed}x{n}"


def lag_writer(job: LagJob, barrier: Any, results: Any) -> None:
    """Adds one document at a time (a pause between), recording when each ``add`` returned."""
    rng = random.Random(job.seed)
    returned: list[float] = []
    with SearchEngine(job.root) as engine:
        corpus = engine.corpus(job.corpus)
        barrier.wait()
        for n in range(job.documents):
            time.sleep(job.pause_s * (0.5 + rng.random()))
            token = _token(n, job.seed)
            corpus.add([Document(id=f"lag-{job.seed}-{n}", title=token, text=f"{token} lag")])
            returned.append(time.monotonic())
    results.put({"returned": returned})


def lag_reader(job: LagJob, barrier: Any, results: Any, stop: Any) -> None:
    """Searches in a loop for the next expected document's token; records when each was
    first found. Gives up on a document after 10 s (recorded as not found)."""
    found: list[float | None] = []
    searches = 0
    with SearchEngine(job.root) as engine:
        corpus = engine.corpus(job.corpus)
        corpus.search("warm up")
        barrier.wait()
        n = 0
        since = time.monotonic()
        while n < job.documents and not stop.is_set():
            hits = corpus.search(_token(n, job.seed), top_k=1)
            searches += 1
            now = time.monotonic()
            if hits and hits[0].source_id == f"lag-{job.seed}-{n}":
                found.append(now)
                n, since = n + 1, now
            elif now - since > 10.0:
                found.append(None)
                n, since = n + 1, now
    results.put({"found": found, "searches": searches})


def overhead_probe(root: str, corpus_name: str, queries: tuple[str, ...], blocks: int) -> Any:
    """Mean keyword search time with the per-search change check and with it replaced by
    a no-op, in adjacent pairs of blocks (same process, nearly the same load: the ratio
    within each pair survives a machine whose load drifts); and the check alone.

    Reaches one private attribute (``Corpus._store.changed``): the public API has no way
    to search without the check, which is the point.
    """
    with SearchEngine(root) as engine:
        corpus = engine.corpus(corpus_name)
        store = corpus._store  # private: see the docstring
        real = store.changed
        for q in queries[:WARMUP_SEARCHES]:
            corpus.search(q)
        with_check: list[float] = []
        without: list[float] = []
        for b in range(blocks):
            for variant in (True, False) if b % 2 == 0 else (False, True):
                store.changed = real if variant else (lambda: False)  # type: ignore[method-assign]
                started = time.perf_counter()
                for q in queries:
                    corpus.search(q)
                per = (time.perf_counter() - started) / len(queries)
                (with_check if variant else without).append(per)
        store.changed = real  # type: ignore[method-assign]
        calls = 20_000
        started = time.perf_counter()
        for _ in range(calls):
            real()
        check_s = (time.perf_counter() - started) / calls
    return {"with_check": with_check, "without_check": without, "check_s": check_s}


def drain(results: Any, expected: int, timeout_s: float) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < expected:
        try:
            out.append(results.get(timeout=max(0.1, deadline - time.monotonic())))
        except queue.Empty:
            if time.monotonic() > deadline:
                raise TimeoutError("a benchmark process did not report back") from None
    return out
