"""Micro-benchmarks (pytest-benchmark). With ``--benchmark-disable`` (the default in
pyproject) each runs once as an ordinary test; compare timings with
``pytest tests/bench/test_micro.py --benchmark-enable --benchmark-only``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.dataset import BeirDataset, load_beir
from bench.encoder import SentenceEncoder
from bench.errors import SystemUnavailable
from bench.run import FIXTURE_DIR
from bench.systems.base import SystemContext
from bench.systems.tandem import TandemSystem, engine_api
from bench.vector_cache import VectorCache
from sparse import (
    MAX_QUERY_LENGTH,
    MAX_SOURCES,
    AccessContext,
    EvidenceSource,
    KeywordSearchFacade,
    RetrievalQuery,
)


class EchoBackend:
    """An index-backed backend answering instantly, recording what the facade passed on."""

    name = "echo"
    priority = 10

    def __init__(self) -> None:
        self.seen: list[RetrievalQuery] = []

    def is_available(self) -> bool:
        return True

    def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
        self.seen.append(query)
        return [EvidenceSource(source_id=f"s{i}", title="", url="", excerpt="") for i in range(3)]


def test_facade_clamping(benchmark: Any) -> None:
    backend = EchoBackend()
    facade = KeywordSearchFacade.index_backed([backend])
    query = "   " + "reset password " * 400 + "   "  # past MAX_QUERY_LENGTH

    hits = benchmark(facade.search, query, 10_000, -3)

    assert len(hits) == 3
    last = backend.seen[-1]
    assert len(last.text) <= MAX_QUERY_LENGTH and last.text == last.text.strip()
    assert last.limit == MAX_SOURCES and last.language_id == 0


@pytest.fixture(scope="module")
def fixture_data() -> BeirDataset:
    return load_beir(FIXTURE_DIR)


@pytest.fixture(scope="module")
def tandem_hybrid(
    tmp_path_factory: pytest.TempPathFactory, fixture_data: BeirDataset, encoder: SentenceEncoder
) -> Iterator[TandemSystem]:
    try:
        engine_api()
    except SystemUnavailable as exc:
        pytest.skip(f"engine public API not importable yet ({exc})")
    cache = VectorCache(tmp_path_factory.mktemp("vectors"))
    vectors, _ = cache.get_or_compute(encoder, fixture_data, progress=False)
    ctx = SystemContext(tmp_path_factory.mktemp("tandem"), encoder.model, lambda: encoder)
    system = TandemSystem(ctx, hybrid=True)
    system.index(fixture_data.documents, vectors)
    yield system
    system.close()


def test_hybrid_search_on_the_fixture_corpus(benchmark: Any, tandem_hybrid: TandemSystem) -> None:
    ids = benchmark(tandem_hybrid.search, "E-4021 sync error", 10)
    assert ids and len(ids) <= 10
    assert ids[0] == _doc_id_with_title(FIXTURE_DIR, "Error E-4021 while syncing Drive")


def _doc_id_with_title(root: Path, title: str) -> str:
    return next(d.doc_id for d in load_beir(root).documents if d.title == title)
