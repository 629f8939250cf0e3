"""An embedder that answers with unusable vectors is treated as unavailable.

NaN or infinite values, all-zero rows, too few rows, a 1-D array or the wrong width:
committed, such vectors were refused by the vector index on every later open (a corpus
that no longer opened); used as a query, they made ``search`` raise. Through the corpus's
``DimensionGuard`` they are provider trouble: documents are stored DEGRADED (counted in
``documents_degraded``) and heal through ``repair`` once the provider answers properly,
and a search answers from keywords.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from prometheus_client import generate_latest

from dense import EmbedderUnavailable, embed_query
from engine import Corpus, CorpusConfig, SearchEngine
from engine.config import SentenceTransformerEmbedding
from engine.dimension_guard import DimensionGuard, checked_output
from engine.storage import DocumentStore, EmbeddingStatus
from tests.support.fakes import HashEmbedder
from tests.support.metrics_support import docs, parse, value

DIM = 16
Vectors = npt.NDArray[np.float32]


def _nan(v: Vectors) -> Vectors:
    v[:] = np.nan
    return v


def _inf(v: Vectors) -> Vectors:
    v[:, 0] = np.inf
    return v


FAULTS: dict[str, Callable[[Vectors], object]] = {
    "nan": _nan,
    "one-nan-row": lambda v: np.vstack([v[:-1], np.full((1, DIM), np.nan, np.float32)]),
    "infinite": _inf,
    "float64-overflow": lambda v: v.astype(np.float64) * 1e300,
    "all-zero": np.zeros_like,
    "tiny": lambda v: v * np.float32(1e-30),
    "no-rows": lambda v: v[:0],
    "too-few-rows": lambda v: v[:-1],
    "too-many-rows": lambda v: np.vstack([v, v]),
    "one-d": lambda v: v[0],
    "three-d": lambda v: v[None, :, :],
    "wider": lambda v: np.hstack([v, v]),
    "ragged": lambda v: [list(row) for row in v[:-1]] + [[1.0]],
    "none": lambda v: None,
}


class FaultyOutputEmbedder:
    """A ``HashEmbedder`` whose output ``fault`` (a key of ``FAULTS``, or None) corrupts."""

    def __init__(self) -> None:
        self._inner = HashEmbedder(dimension=DIM, name="faulty-output")
        self.fault: str | None = None
        self.texts: list[str] = []

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dimension(self) -> int:
        return DIM

    def is_available(self) -> bool:
        return True

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.texts.extend(texts)
        if self.fault == "io":  # what a requests/httpx client raises when its server resets
            raise ConnectionResetError(104, "Connection reset by peer")
        out = self._inner.embed(texts)
        return out if self.fault is None else FAULTS[self.fault](out)  # type: ignore[return-value]


class FaultyQueryEmbedder(FaultyOutputEmbedder):
    """Also a ``QueryEmbedder``: its own ``embed_query`` answers the (corrupted) row."""

    def embed_query(
        self, text: str, *, before_model: Callable[[], object] | None = None
    ) -> Vectors:
        if before_model is not None:
            before_model()
        bad = np.asarray(self.embed([text]), dtype=np.float32)
        # The faulty batch's one row; a batch of another number of rows as it is; of a
        # 1-D "batch", its first value (a scalar).
        row: Vectors = bad[0] if bad.ndim == 1 or (bad.ndim > 1 and len(bad) == 1) else bad
        return row


class Rig:
    def __init__(self, path: Path, embedder: FaultyOutputEmbedder) -> None:
        self.path = path
        self.embedder = embedder
        self.engine = self._open()
        self.corpus = self.engine.create_corpus(
            CorpusConfig(name="docs", embedder=SentenceTransformerEmbedding(model="m"))
        )

    def _open(self) -> SearchEngine:
        return SearchEngine(self.path, embedder_factory=lambda spec: self.embedder)

    def reopen(self) -> Corpus:
        self.engine.close()
        self.engine = self._open()
        self.corpus = self.engine.corpus("docs")
        return self.corpus

    def degraded_gauge(self) -> float | None:
        samples = parse(generate_latest(self.engine.registry).decode())
        return value(samples, "tandem_documents_degraded", corpus="docs")

    def statuses(self, ids: list[str]) -> dict[str, EmbeddingStatus]:
        """What the store (the source of truth) says of each id's embedding."""
        store = DocumentStore(self.path / "corpora" / "docs" / "store.sqlite3", read_only=True)
        try:
            stored = store.get_many(ids, public_only=False)
        finally:
            store.close()
        return {i: stored[i].embedding_status for i in ids}


@pytest.fixture
def embedder() -> FaultyOutputEmbedder:
    return FaultyOutputEmbedder()


@pytest.fixture
def rig(tmp_path: Path, embedder: FaultyOutputEmbedder) -> Iterator[Rig]:
    r = Rig(tmp_path / "engine", embedder)
    r.corpus.add(docs(4, "ok"))
    yield r
    r.engine.close()


# -- the check itself --------------------------------------------------------------------


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_fault_is_refused_as_provider_trouble(fault: str) -> None:
    good = HashEmbedder(dimension=DIM).embed(["a b", "c d", "e f"])
    with pytest.raises(EmbedderUnavailable):
        checked_output(FAULTS[fault](good.copy()), 3, DIM)


def test_good_output_passes_unchanged() -> None:
    good = HashEmbedder(dimension=DIM).embed(["a b", "c d"])
    np.testing.assert_array_equal(checked_output(good, 2, DIM), good)
    np.testing.assert_array_equal(checked_output(good.astype(np.float64), 2, None), good)
    assert checked_output(np.zeros((0, DIM), np.float32), 0, DIM).shape == (0, DIM)


@pytest.mark.parametrize("embedder_type", [FaultyOutputEmbedder, FaultyQueryEmbedder])
@pytest.mark.parametrize("fault", ["nan", "infinite", "all-zero", "no-rows", "one-d", "three-d"])
def test_guarded_query_faults_raise_only_embedder_unavailable(
    embedder_type: type[FaultyOutputEmbedder], fault: str
) -> None:
    inner = embedder_type()
    inner.fault = fault
    guard = DimensionGuard(inner, lambda: DIM)
    calls: list[int] = []
    with pytest.raises(EmbedderUnavailable):
        embed_query(guard, "a query", before_model=lambda: calls.append(1))
    assert calls == [1]  # the hook still runs exactly once


def test_the_refusal_is_logged_once_and_without_the_texts(
    embedder: FaultyOutputEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    guard = DimensionGuard(embedder, lambda: DIM)
    embedder.fault = "nan"
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            with pytest.raises(EmbedderUnavailable):
                guard.embed(["secret words here"])
    warnings = [r for r in caplog.records if r.name == "engine.dimension_guard"]
    assert len(warnings) == 1
    assert "NaN" in warnings[0].getMessage()
    assert all("secret" not in r.getMessage() for r in caplog.records)


# -- through a corpus --------------------------------------------------------------------


ADD_FAULTS = ["nan", "one-nan-row", "infinite", "all-zero", "no-rows", "too-few-rows", "one-d"]


@pytest.mark.parametrize("fault", ADD_FAULTS)
def test_bad_vectors_at_add_store_documents_degraded_and_repair_heals_them(
    rig: Rig, embedder: FaultyOutputEmbedder, fault: str
) -> None:
    embedder.fault = fault
    result = rig.corpus.add(docs(3, "bad"))  # no exception
    assert result.degraded == 3
    ids = [f"bad{i}" for i in range(3)]
    assert set(rig.statuses(ids).values()) == {EmbeddingStatus.DEGRADED}
    stats = rig.corpus.stats()
    assert (stats["documents"], stats["degraded"], stats["vectors"]) == (7, 3, 4)
    assert rig.degraded_gauge() == 3
    # keyword-searchable meanwhile (the query vector is refused too: keywords answer)
    assert "bad1" in {p.source_id for p in rig.corpus.search("bravo charlie number 1 bad")}

    corpus = rig.reopen()  # the corpus still opens
    assert corpus.stats()["degraded"] == 3

    embedder.fault = None
    assert corpus.repair() == 3
    stats = corpus.stats()
    assert (stats["degraded"], stats["vectors"]) == (0, 7)
    assert rig.degraded_gauge() == 0
    assert set(rig.statuses(ids).values()) == {EmbeddingStatus.EMBEDDED}
    assert rig.reopen().stats()["vectors"] == 7


@pytest.mark.parametrize("fault", ["nan", "all-zero", "no-rows", "too-few-rows", "one-d"])
def test_bad_vectors_during_repair_leave_documents_degraded(
    rig: Rig, embedder: FaultyOutputEmbedder, fault: str
) -> None:
    embedder.fault = "nan"
    rig.corpus.add(docs(3, "late"))
    embedder.fault = fault
    assert rig.corpus.repair() == 0  # no exception, nothing healed
    ids = [f"late{i}" for i in range(3)]
    assert set(rig.statuses(ids).values()) == {EmbeddingStatus.DEGRADED}
    assert rig.corpus.stats()["degraded"] == 3
    assert rig.degraded_gauge() == 3

    corpus = rig.reopen()
    embedder.fault = None
    assert corpus.repair() == 3
    assert (corpus.stats()["degraded"], corpus.stats()["vectors"]) == (0, 7)
    assert rig.degraded_gauge() == 0
    assert rig.reopen().stats()["vectors"] == 7


@pytest.mark.parametrize("embedder_type", [FaultyOutputEmbedder, FaultyQueryEmbedder])
@pytest.mark.parametrize(
    "fault", ["nan", "infinite", "all-zero", "no-rows", "too-many-rows", "one-d", "three-d"]
)
def test_a_bad_query_vector_answers_from_keywords(
    tmp_path: Path, embedder_type: type[FaultyOutputEmbedder], fault: str
) -> None:
    rig = Rig(tmp_path / "engine", embedder_type())
    try:
        rig.corpus.add(docs(5, "d"))
        hybrid = rig.corpus.search("bravo number 3")
        assert any(p.ranks.dense is not None for p in hybrid)
        rig.embedder.fault = fault
        hits = rig.corpus.search("bravo number 3")  # no exception
        assert hits and hits[0].source_id == "d3"
        assert all(p.ranks.dense is None for p in hits)  # answered from keywords
        samples = parse(generate_latest(rig.engine.registry).decode())
        fell_back = value(
            samples, "tandem_search_fallbacks_total", corpus="docs", reason="embedder_error"
        )
        assert fell_back == 1
    finally:
        rig.engine.close()


@pytest.mark.parametrize("embedder_type", [FaultyOutputEmbedder, FaultyQueryEmbedder])
def test_an_io_error_from_the_provider_is_provider_trouble(
    tmp_path: Path, embedder_type: type[FaultyOutputEmbedder]
) -> None:
    """Regression: an ``OSError`` out of a custom embedder (``requests``' and ``httpx``'
    connection errors are ``OSError`` s) surfaced as ``StorageError`` ("storage I/O
    failed"): ``search`` and ``add`` raised instead of degrading."""
    rig = Rig(tmp_path / "engine", embedder_type())
    try:
        rig.corpus.add(docs(5, "d"))
        rig.embedder.fault = "io"
        hits = rig.corpus.search("bravo number 3")  # no exception
        assert hits and hits[0].source_id == "d3"
        assert all(p.ranks.dense is None for p in hits)
        assert rig.corpus.add(docs(2, "late")).degraded == 2
        rig.embedder.fault = None
        assert rig.corpus.repair() == 2
        assert rig.corpus.stats()["degraded"] == 0
    finally:
        rig.engine.close()
