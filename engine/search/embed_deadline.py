"""The query embedding's deadline: a hybrid search waits for its vector at most so long.

An embedder is opaque — a local model, Ollama, or anything a custom factory builds — and
one that never returns must not hold the search that called it. So the query is embedded
on a worker thread and the search waits for it at most ``timeout_s``; past that it is
answered from keywords (``QueryEmbedTimeout``, counted as ``embedder_timeout``), as when
the embedder fails. The call itself cannot be cancelled: it keeps its worker until it
returns.

A stuck embedder must not cost a thread per search. While a call this corpus gave up on
is still running, later searches do not call the embedder at all: they answer from
keywords at once (the same reason). When the last such call returns, whatever it
returned, searches embed again — no timer, no probe: the call that got stuck is the
probe. Searches already waiting when the embedder stalled each hold their own call, so
the threads held are bounded by the searches in flight at that moment.

The workers are daemon threads, reused while idle: a call that never returns keeps its
thread, never the process (a ``ThreadPoolExecutor``'s threads are joined at exit). But a
process must not finalise under a call that is merely slow — a model still loading on a
daemon thread while the interpreter tears down crashed the process at exit (SIGSEGV, or
``terminate called`` from ONNX Runtime) — so while a call runs, an exit waits for it, up
to ``EXIT_WAIT_S``.

``timeout_s=None`` (the default) embeds in the calling thread, with no deadline.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

import numpy as np
import numpy.typing as npt

from dense import Embedder, EmbedderUnavailable, embed_query

logger = logging.getLogger(__name__)

DEFAULT_QUERY_EMBED_TIMEOUT_S: float | None = None
"""No deadline unless asked for (as Elasticsearch applies no search timeout unless asked):
embedding on a worker thread costs every hybrid search ~0.2-0.7 ms (measured, SciFact,
all-MiniLM-L6-v2, paired in one process: the embedding alone +0.2 ms, the whole search
+0.66 ms at a 10.5 ms p50), a price for a hang that the built-in local model does not
have and Ollama's client bounds by itself. Ask for one where a custom embedder may hang.

How long, when asked for: a deadline bounds a hang, it should not cut a slow call. A
healthy query embedding takes milliseconds, but the first one in a process may load the
model — up to ~15 s measured on a 2-core machine (torch's import, then the one-off ONNX
export) — and a call cut off degrades every search of the corpus until it returns: 30 s
(Ollama's own request timeout, ``OllamaEmbedding.timeout_s``) clears every cold start."""

Vector = npt.NDArray[np.float32]

EXIT_WAIT_S = 30.0
"""How long a process exit waits for query embeddings still running (a cold start's
model load takes up to ~15 s; one that never returns is left after this)."""


class QueryEmbedTimeout(EmbedderUnavailable):
    """The query embedding missed its deadline, or an earlier one that did is still
    running (internal: the search answers from keywords)."""


class EmbedderDown(EmbedderUnavailable):
    """The embedder's ``is_available()``, asked within the deadline, said no (internal:
    the search answers from keywords, counted as ``embedder_down``)."""


class _DaemonWorkers:
    """Daemon threads running submitted jobs; an idle one is reused before a new one starts."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one token per worker waiting for a job
        self._lock = threading.Lock()
        self._started = 0
        self._closed = False
        self._running = 0  # jobs in a call now; an exit waits for them (``_drain_at_exit``)
        self._settled = threading.Condition(threading.Lock())
        self._pid = os.getpid()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)
        if self._idle.acquire(blocking=False):
            return  # a waiting worker takes it
        with self._lock:
            self._started += 1
            number = self._started
        threading.Thread(target=self._work, name=f"{self._name}-{number}", daemon=True).start()

    def close(self) -> None:
        """Idle workers end now; one still in a call ends when the call returns."""
        with self._lock:
            self._closed = True
            started = self._started
        for _ in range(started):
            self._jobs.put(None)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            self._enter()
            try:
                job()
            finally:
                self._leave()
            if self._closed:
                return
            self._idle.release()

    def _enter(self) -> None:
        with self._settled:
            self._running += 1
            if self._running == 1:
                atexit.register(self._drain_at_exit)

    def _leave(self) -> None:
        with self._settled:
            self._running -= 1
            if self._running == 0:
                atexit.unregister(self._drain_at_exit)
                self._settled.notify_all()

    def _drain_at_exit(self) -> None:
        if os.getpid() != self._pid:
            return  # a forked child inherits the registration, not the running threads
        with self._settled:
            if not self._settled.wait_for(lambda: self._running == 0, EXIT_WAIT_S):
                logger.warning(
                    "%s: exiting with %d query embedding(s) still running after %.0f s",
                    self._name,
                    self._running,
                    EXIT_WAIT_S,
                )


class EmbedDeadline:
    """Embeds one corpus's queries, each within ``timeout_s`` (``None``: no deadline)."""

    def __init__(self, corpus: str, timeout_s: float | None) -> None:
        self._corpus = corpus
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        # Per embedder (a switch installs another): calls given up on and still running.
        self._overdue: dict[int, tuple[Embedder, int]] = {}
        self._workers: _DaemonWorkers | None = None
        self._pid = os.getpid()

    @property
    def bounded(self) -> bool:
        """Whether calls have a deadline (``timeout_s`` is not None)."""
        return self._timeout_s is not None

    def embed(
        self,
        embedder: Embedder,
        text: str,
        before_model: Callable[[], object] | None,
        *,
        check_available: bool = False,
    ) -> Vector:
        """``dense.embed_query(embedder, text, before_model=...)`` within the deadline;
        ``QueryEmbedTimeout`` when it is missed or an earlier miss still runs. Whatever
        else the call raises is raised here. ``before_model`` runs on the worker.

        ``check_available``: ask ``embedder.is_available()`` first, on the worker and
        within the same deadline (``EmbedderDown`` when it says no). Asked by the search
        before the deadline began, an Ollama health probe held the search for up to its
        ``health_timeout_s`` and a custom one that hung held it for good."""
        timeout = self._timeout_s
        if timeout is None:
            _check(embedder, check_available)
            return embed_query(embedder, text, before_model=before_model)
        workers = self._pool()  # first: a forked child forgets its parent's overdue calls
        key = id(embedder)
        if key in self._overdue:  # (read without the lock: a stale answer costs one call)
            raise QueryEmbedTimeout("an earlier query embedding is still running")
        future: Future[Vector] = Future()
        started = time.monotonic()

        def call() -> None:
            if not future.set_running_or_notify_cancel():
                return  # given up on before its worker started
            try:
                _check(embedder, check_available)
                future.set_result(embed_query(embedder, text, before_model=before_model))
            except BaseException as exc:  # handed to the waiting search, whatever it is
                future.set_exception(exc)

        workers.submit(call)
        try:
            return future.result(timeout)
        except FutureTimeout:
            if future.cancel():  # never started: nothing is left running
                raise QueryEmbedTimeout("the query embedding did not start in time") from None
            if future.done():  # answered since: take it
                return future.result()
        with self._lock:
            embedder_, count = self._overdue.get(key, (embedder, 0))
            self._overdue[key] = (embedder_, count + 1)
            first = count == 0
        if first:
            logger.warning(
                "corpus %r: query embedding not answered within %.3g s; searches answer "
                "from keywords until it returns",
                self._corpus,
                timeout,
            )
        future.add_done_callback(lambda done: self._returned(key, started, done))
        raise QueryEmbedTimeout(f"query embedding not answered within {timeout:.3g} s")

    def close(self) -> None:
        """Stop the idle workers (a call still running keeps its own until it returns)."""
        with self._lock:
            workers, self._workers = self._workers, None
        if workers is not None:
            workers.close()

    def _returned(self, key: int, started: float, done: Future[Vector]) -> None:
        with self._lock:
            entry = self._overdue.get(key)
            if entry is None:  # not expected; a worker's callback must never raise
                return
            embedder, count = entry
            if count > 1:
                self._overdue[key] = (embedder, count - 1)
                return
            del self._overdue[key]
        failed = done.exception()
        logger.log(
            logging.INFO if failed is None else logging.WARNING,
            "corpus %r: an overdue query embedding %s after %.1f s; hybrid search resumes",
            self._corpus,
            "returned" if failed is None else f"failed ({type(failed).__name__})",
            time.monotonic() - started,
        )

    def _pool(self) -> _DaemonWorkers:
        with self._lock:
            if self._pid != os.getpid():
                # A forked child: the parent's workers did not come along (nor did its
                # overdue calls), and a job queued for them would wait for ever.
                self._workers, self._overdue, self._pid = None, {}, os.getpid()
            if self._workers is None:
                self._workers = _DaemonWorkers(f"tandem-embed-{self._corpus}")
            return self._workers


def _check(embedder: Embedder, asked: bool) -> None:
    if asked and not embedder.is_available():
        raise EmbedderDown("the embedder is not available")
