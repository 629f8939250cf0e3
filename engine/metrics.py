"""Prometheus metrics, owned by one ``SearchEngine`` (its own registry, nothing global).

Labels are bounded: corpus names and enum values only. No query text, document text or
user identifier ever becomes a label or a value.

The per-corpus state gauges (``tandem_documents``, ``tandem_documents_degraded``) are set
after every write and, through a refresher the engine installs, re-read from the document
stores at every scrape, so a scrape sees the stores' committed truth even after a write
that failed half-way. The refresher always runs on one dedicated thread: the stores keep
one SQLite connection per reading thread, and a thread-per-request HTTP server must not
open a new one per scrape.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

from engine.search.strategy import Arm, FallbackReason, Strategy

logger = logging.getLogger(__name__)

_MULTIPROCESS_ENV = ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir")

Refresher = Callable[[], None]

_REFRESH_TIMEOUT_S = 10.0

_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.002,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.02,
    0.03,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


class NlOutcome(enum.Enum):
    """How one natural-language question (``Corpus.ask``) ended."""

    OK = "ok"
    INVALID = "invalid"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"


_NL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0)


class _RefreshedGauges:
    """Collector for the corpus-state gauges: runs the refresher, then reports them."""

    def __init__(self, gauges: tuple[Gauge, ...]) -> None:
        self._gauges = gauges
        self._refresher: Refresher | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def set_refresher(self, refresher: Refresher | None) -> None:
        with self._lock:
            self._refresher = refresher

    def describe(self) -> Iterator[Metric]:
        for gauge in self._gauges:
            yield from gauge.describe()

    def collect(self) -> Iterator[Metric]:
        self._refresh()
        for gauge in self._gauges:
            yield from gauge.collect()

    def _refresh(self) -> None:
        with self._lock:
            if self._refresher is None:
                return
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="tandem-metrics-refresh")
            future = self._pool.submit(self._refresher)
        try:
            future.result(timeout=_REFRESH_TIMEOUT_S)
        except FutureTimeout:
            logger.warning("corpus gauges not refreshed within %.0f s", _REFRESH_TIMEOUT_S)

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
            self._refresher = None
        if pool is not None:
            pool.shutdown(wait=True)


class EngineMetrics:
    """Every metric the engine exports, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        # Not registered themselves: ``_RefreshedGauges`` reports them after a refresh.
        # multiprocess_mode: with several server workers (prometheus_client's multiprocess
        # mode) a scrape reports the value set last, by whichever process; else ignored.
        self.documents = Gauge(
            "tandem_documents",
            "Public documents stored in the corpus (those a search can return).",
            ["corpus"],
            registry=None,
            multiprocess_mode="mostrecent",
        )
        self.documents_degraded = Gauge(
            "tandem_documents_degraded",
            "Public documents stored without a vector because embedding failed; "
            "keyword-only until re-embedded.",
            ["corpus"],
            registry=None,
            multiprocess_mode="mostrecent",
        )
        # Refreshed too: a corpus nobody searches (or one just reopened) would otherwise
        # keep the last value a search set, or have no series for an alert to fire on.
        self.embedder_up = Gauge(
            "tandem_embedder_up",
            "1 when the corpus's embedder answered its last health check, else 0.",
            ["corpus"],
            registry=None,
            multiprocess_mode="mostrecent",
        )
        self._state = _RefreshedGauges((self.documents, self.documents_degraded, self.embedder_up))
        r.register(self._state)
        self.searches = Counter(
            "tandem_searches",
            "Searches answered, by the strategy the router resolved.",
            ["corpus", "strategy"],
            registry=r,
        )
        self.fallbacks = Counter(
            "tandem_search_fallbacks",
            "Searches of a hybrid corpus answered from keywords only, by reason.",
            ["corpus", "reason"],
            registry=r,
        )
        self.sparse_arm_empty = Counter(
            "tandem_sparse_arm_empty",
            "Hybrid searches whose index-backed keyword arm returned nothing while the "
            "corpus has documents (e.g. the index is missing).",
            ["corpus"],
            registry=r,
        )
        self.search_duration = Histogram(
            "tandem_search_duration_seconds",
            "Wall time of Corpus.search.",
            ["corpus"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.arm_duration = Histogram(
            "tandem_arm_duration_seconds",
            "Wall time of one arm of a search (sparse: keyword facade; dense: FAISS; "
            "completion: each arm scoring the other's extra candidates).",
            ["corpus", "arm"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.embed_duration = Histogram(
            "tandem_embed_duration_seconds",
            "Wall time of one embedder call, by purpose.",
            ["corpus", "purpose"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.repaired = Counter(
            "tandem_repair_documents",
            "Degraded documents re-embedded successfully.",
            ["corpus"],
            registry=r,
        )
        self.nl_requests = Counter(
            "tandem_nl_requests",
            "Natural-language questions (Corpus.ask), by outcome.",
            ["corpus", "outcome"],
            registry=r,
        )
        self.nl_duration = Histogram(
            "tandem_nl_duration_seconds",
            "Wall time of Corpus.ask, model call included.",
            ["corpus"],
            buckets=_NL_BUCKETS,
            registry=r,
        )

    def set_refresher(self, refresher: Refresher | None) -> None:
        """Install what re-reads the corpus-state gauges before each scrape (None: nothing)."""
        self._state.set_refresher(refresher)

    def close(self) -> None:
        """Stop the refresher thread (scrapes after this report the last values set)."""
        self._state.close()

    def track(self, corpus: str, *, vectors: bool) -> None:
        """Create a corpus's counter series at 0, so rates and alerts work from the start."""
        for strategy in Strategy:
            self.searches.labels(corpus, strategy.value)
        self.sparse_arm_empty.labels(corpus)
        if vectors:
            for reason in FallbackReason:
                self.fallbacks.labels(corpus, reason.value)
            self.repaired.labels(corpus)

    def forget(self, corpus: str) -> None:
        """Drop every series of a dropped corpus. Not in prometheus_client's multiprocess
        mode (``tandem serve --workers N``): its values live in the workers' files, which
        ``remove`` does not touch (it only warns, on every drop); the scrape leaves out
        corpora that are gone instead."""
        if any(name in os.environ for name in _MULTIPROCESS_ENV):
            return
        for metric in (
            self.documents,
            self.documents_degraded,
            self.embedder_up,
            self.sparse_arm_empty,
            self.search_duration,
            self.repaired,
            self.nl_duration,
        ):
            with contextlib.suppress(KeyError):
                metric.remove(corpus)
        for metric2, values in (
            (self.searches, [s.value for s in Strategy]),
            (self.fallbacks, [f.value for f in FallbackReason]),
            (self.arm_duration, [a.value for a in Arm]),
            (self.embed_duration, ["query", "documents"]),
            (self.nl_requests, [o.value for o in NlOutcome]),
        ):
            for value in values:
                with contextlib.suppress(KeyError):
                    metric2.remove(corpus, value)
