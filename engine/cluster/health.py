"""Which shards are up, and the coordinator's metrics about them.

A shard is marked down when a call to it fails (its actor died or is restarting) and up
again when it answers a probe. Searches skip shards marked down, so an outage costs one
failed call, not one per search; a background thread probes the down shards until they
answer. Every scrape of the coordinator's registry first probes every shard, so
``tandem_shards_up{corpus}`` is current even when no search ran.

Metrics (on a registry the coordinator owns; labelled by corpus, two by one more label):

- ``tandem_shards{corpus}`` — shards the corpus has;
- ``tandem_shards_up{corpus}`` — shards that answered their last call or probe;
- ``tandem_shard_failures_total{corpus,operation}`` — calls to a shard that failed
  (``search``, ``write``, ``read``, ``probe``);
- ``tandem_write_retries_total{corpus}`` — write calls sent again after a shard failure;
- ``tandem_shard_restarts_total{corpus}`` — restarts seen (a probe met a new incarnation
  of a shard: an outage shorter than the gap between two scrapes still counts);
- ``tandem_partial_searches_total{corpus}`` — searches answered without every shard;
- ``tandem_search_fallbacks_total{corpus,reason}`` — searches of a hybrid corpus answered
  from keywords only, as one corpus counts them (``embedder_down``: the coordinator's
  embedder is down; ``embedder_error``: its query vector failed or was unusable, or
  every shard failed the vector round);
- ``tandem_cluster_search_duration_seconds{corpus}`` — sharded search latency.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import Metric

logger = logging.getLogger(__name__)

Probe = Callable[[Sequence[int], float], Mapping[int, str]]
"""(shard indexes, timeout) -> the indexes that answered, with their incarnation ids."""

_BUCKETS = (0.001, 0.002, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class Operation(enum.Enum):
    SEARCH = "search"
    WRITE = "write"
    READ = "read"
    PROBE = "probe"


class ClusterMetrics:
    """The coordinator's metrics; ``registry`` defaults to a fresh one (nothing global)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.shards = Gauge(
            "tandem_shards", "Shards of a sharded corpus", ["corpus"], registry=None
        )
        self.shards_up = Gauge(
            "tandem_shards_up",
            "Shards that answered their last call or probe",
            ["corpus"],
            registry=None,
        )
        self._refresh: Callable[[], None] | None = None
        self._refresh_lock = threading.Lock()
        self.registry.register(_ProbedGauges(self))
        self.failures = Counter(
            "tandem_shard_failures",
            "Calls to a shard that failed",
            ["corpus", "operation"],
            registry=self.registry,
        )
        self.restarts = Counter(
            "tandem_shard_restarts",
            "Shard restarts seen by the coordinator",
            ["corpus"],
            registry=self.registry,
        )
        self.write_retries = Counter(
            "tandem_write_retries", "Write calls sent again", ["corpus"], registry=self.registry
        )
        self.partial_searches = Counter(
            "tandem_partial_searches",
            "Searches answered without every shard",
            ["corpus"],
            registry=self.registry,
        )
        self.fallbacks = Counter(
            "tandem_search_fallbacks",
            "Searches of a hybrid corpus answered from keywords only, by reason.",
            ["corpus", "reason"],
            registry=self.registry,
        )
        self.search_duration = Histogram(
            "tandem_cluster_search_duration_seconds",
            "Sharded search latency",
            ["corpus"],
            buckets=_BUCKETS,
            registry=self.registry,
        )

    def set_refresher(self, refresh: Callable[[], None] | None) -> None:
        self._refresh = refresh

    def refresh(self) -> None:
        refresh = self._refresh
        if refresh is None:
            return
        with self._refresh_lock:  # one probe at a time, however many scrapers
            try:
                refresh()
            except Exception as exc:  # a scrape must answer even if probing broke
                logger.warning("shard probe before scrape failed (%s)", type(exc).__name__)


class _ProbedGauges:
    """Collector: probe every shard, then report the two shard gauges."""

    def __init__(self, metrics: ClusterMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return [*self._metrics.shards.collect(), *self._metrics.shards_up.collect()]

    def collect(self) -> Iterator[Metric]:
        self._metrics.refresh()
        yield from self._metrics.shards.collect()
        yield from self._metrics.shards_up.collect()


class ShardHealth:
    """Up/down per shard; probes the down ones on a background thread until they answer."""

    def __init__(
        self,
        corpus: str,
        count: int,
        metrics: ClusterMetrics,
        probe: Probe,
        *,
        probe_interval_s: float,
        probe_timeout_s: float,
    ) -> None:
        self._corpus = corpus
        self._up = [True] * count
        self._incarnations: dict[int, str] = {}
        self._metrics = metrics
        self._probe = probe
        self._interval = probe_interval_s
        self._timeout = probe_timeout_s
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._prober: threading.Thread | None = None
        self._closed = False
        metrics.shards.labels(corpus).set(count)
        metrics.shards_up.labels(corpus).set(count)
        metrics.set_refresher(self.probe_all)

    @property
    def count(self) -> int:
        return len(self._up)

    def up(self) -> list[int]:
        with self._lock:
            return [i for i, up in enumerate(self._up) if up]

    def is_up(self, index: int) -> bool:
        with self._lock:
            return self._up[index]

    def mark_down(self, index: int, operation: Operation) -> None:
        self._metrics.failures.labels(self._corpus, operation.value).inc()
        with self._lock:
            if self._closed:
                return
            if self._up[index]:
                self._up[index] = False
                logger.warning("shard %d of %s is down", index, self._corpus)
                self._publish()
            if self._prober is None:  # the loop clears it, under this lock, as it ends
                self._prober = threading.Thread(
                    target=self._probe_loop, name=f"tandem-probe-{self._corpus}", daemon=True
                )
                self._prober.start()
            self._wake.notify_all()

    def mark_up(self, index: int) -> None:
        with self._lock:
            if not self._up[index] and not self._closed:
                self._up[index] = True
                logger.info("shard %d of %s is up", index, self._corpus)
                self._publish()

    def probe_all(self) -> None:
        """Probe every shard now and record the answer (run before each scrape)."""
        answered = self._answers(list(range(self.count)), self._timeout)
        for index in range(self.count):
            if index in answered:
                self.mark_up(index)
            elif self.is_up(index):
                self.mark_down(index, Operation.PROBE)

    def _answers(self, indexes: Sequence[int], timeout_s: float) -> Mapping[int, str]:
        """Probe ``indexes``; count every shard that answers as a new incarnation."""
        answered = self._probe(indexes, timeout_s)
        with self._lock:
            for index, incarnation in answered.items():
                before = self._incarnations.get(index)
                if before is not None and before != incarnation:
                    self._metrics.restarts.labels(self._corpus).inc()
                self._incarnations[index] = incarnation
        return answered

    def wait_until_up(self, index: int, timeout_s: float) -> bool:
        """Probe ``index`` until it answers or ``timeout_s`` passes; True if it answered."""
        import time

        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if index in self._answers([index], min(self._timeout, remaining)):
                self.mark_up(index)
                return True
            with self._lock:
                if self._closed:
                    return False
                self._wake.wait(min(self._interval, max(0.0, deadline - time.monotonic())))

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            # Not reachable through this coordinator any more: a gauge left at its last
            # value told a scrape after close that every (killed) shard was up.
            self._up = [False] * len(self._up)
            self._publish()
            self._wake.notify_all()
            prober = self._prober
        if prober is not None:
            prober.join(timeout=5)
        self._metrics.set_refresher(None)

    def _publish(self) -> None:  # holds the lock
        self._metrics.shards_up.labels(self._corpus).set(sum(self._up))

    def _probe_loop(self) -> None:
        while True:
            with self._lock:
                down = [i for i, up in enumerate(self._up) if not up]
                if self._closed or not down:
                    # Decided under the lock: a mark_down from here on starts a new
                    # prober (asking whether this thread was alive left a window where
                    # it was, but about to return, and no shard was probed again).
                    self._prober = None
                    return
            try:
                answered = self._answers(down, self._timeout)
            except Exception as exc:  # keep probing; a probe must never kill the thread
                logger.warning("shard probe failed (%s)", type(exc).__name__)
                answered = {}
            for index in answered:
                self.mark_up(index)
            with self._lock:
                if self._closed:
                    self._prober = None
                    return
                self._wake.wait(self._interval)
