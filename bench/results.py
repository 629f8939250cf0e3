"""The records a run produces: one ``SystemResult`` per (corpus, system), one ``CorpusFloor``
per corpus (the query-embedding cost every hybrid system pays), as plain JSON-able data."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Status(enum.StrEnum):
    OK = "ok"
    SKIPPED = "skipped"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class SystemResult:
    """Quality and cost of one system on one corpus.

    Memory: ``peak_rss_mib`` is the high-water RSS of the process that ran only this
    system (Python, its libraries and, for systems that embed queries, the model included);
    ``None`` when systems shared one process (``--in-process``). ``rss_delta_mib`` is the
    growth from just before indexing to the end of the searches (psutil readings).

    Ingest: ``ingest_docs_per_s`` is index-only (systems that take vectors get the cached
    corpus vectors); ``ingest_e2e_docs_per_s`` includes embedding the documents (see
    ``bench.runner``); for systems that embed nothing the two are the same.

    Per query: ``per_query_ndcg10`` maps every judged query id to its nDCG@10 (6 decimals),
    so two systems can be paired on the same queries; empty in records written before it
    existed (and in skipped or failed ones).
    """

    corpus: str
    system: str
    status: Status
    reason: str = ""
    n_docs: int = 0
    n_queries: int = 0
    ndcg_at_10: float | None = None
    recall_at_100: float | None = None
    mrr_at_10: float | None = None
    ingest_s: float | None = None
    ingest_docs_per_s: float | None = None
    ingest_e2e_docs_per_s: float | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    mean_ms: float | None = None
    qps: float | None = None
    peak_rss_mib: float | None = None
    rss_delta_mib: float | None = None
    disk_mib: float | None = None
    extra: dict[str, float] = field(default_factory=dict)
    per_query_ndcg10: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SystemResult:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["status"] = Status(known["status"])
        return cls(**known)


@dataclass(frozen=True, slots=True)
class CorpusFloor:
    """Single-query embedding p50 per runtime, measured in the same run (milliseconds)."""

    corpus: str
    p50_ms_by_backend: dict[str, float]
    vectors_from_cache: bool
    encoder_docs_per_s: float | None = None
    """The raw encoder's batch throughput (sentence-transformers, torch) on a spread sample."""
    dataset_path: str = ""
    """The BEIR folder, relative to the working directory (never absolute)."""
    split: str = "test"
    """The judgements scored (``qrels/<split>.tsv``)."""
    self_indexed_queries: int = 0
    """Queries that are themselves documents of the corpus, each left out of its own
    ranking (``bench.dataset``)."""

    @property
    def floor_ms(self) -> float | None:
        """The cheapest way to embed one query with this model here."""
        values = list(self.p50_ms_by_backend.values())
        return min(values) if values else None


def skipped(corpus: str, system: str, reason: str) -> SystemResult:
    return SystemResult(corpus=corpus, system=system, status=Status.SKIPPED, reason=reason)


def errored(corpus: str, system: str, reason: str) -> SystemResult:
    return SystemResult(corpus=corpus, system=system, status=Status.ERROR, reason=reason)
