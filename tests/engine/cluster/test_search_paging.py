"""Pages of a sharded search past the deepest offset: empty, as on one node.

Ray-free: two in-process keyword shards (``ShardActor``) answered inline by a fake
``ShardCalls``, holding more matches than the deepest page reaches.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from engine import CorpusConfig, Document
from engine.cluster.health import ClusterMetrics
from engine.cluster.routing import shard_for
from engine.cluster.search import ShardedSearcher
from engine.cluster.shard import ShardActor, ShardSpec
from engine.limits import MAX_OFFSET, MAX_TOP_K
from tests.support.cluster_fakes import AllUp, InlineCalls

SHARDS = 2
MATCHING = 1_250
CONFIG = CorpusConfig(name="pages", embedder=None)


@pytest.fixture(scope="module")
def searcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShardedSearcher]:
    root = tmp_path_factory.mktemp("cluster-paging")
    bodies = [
        ShardActor(ShardSpec(i, str(root / f"{i:03d}"), CONFIG, create=True)) for i in range(SHARDS)
    ]
    docs = [
        Document(id=f"d{i:04d}", title=f"t{i}", text="apple " + "filler " * (i % 50))
        for i in range(MATCHING)
    ]
    for i, body in enumerate(bodies):
        body._corpus.add([d for d in docs if shard_for(d.id, SHARDS) == i], progress=False)
    found = ShardedSearcher(
        CONFIG,
        SHARDS,
        None,
        InlineCalls(bodies),  # type: ignore[arg-type]
        AllUp(SHARDS),  # type: ignore[arg-type]
        ClusterMetrics(CollectorRegistry()),
        timeout_s=30.0,
    )
    yield found
    found.close()
    for body in bodies:
        body.close()


@pytest.mark.parametrize("offset", [MAX_OFFSET + 1, 5_000, float("inf")])
def test_a_page_past_the_deepest_offset_is_empty(searcher: ShardedSearcher, offset: float) -> None:
    """Regression: an offset past ``MAX_OFFSET`` was clamped to it, so the page at 1,200
    repeated the page at 1,000 and a client paging until an empty page never stopped."""
    assert searcher.search("apple", MAX_TOP_K, offset, None, ()) == []


def test_paging_until_an_empty_page_stops_without_repeating(searcher: ShardedSearcher) -> None:
    seen: list[str] = []
    offset = 0
    for _ in range(MATCHING):  # a bound: a page that repeats forever fails, not hangs
        page = searcher.search("apple", MAX_TOP_K, offset, None, ())
        if not page:
            break
        seen += [p.source_id for p in page]
        offset += len(page)
    else:
        pytest.fail("paging never reached an empty page")
    assert len(seen) == len(set(seen)) == MAX_OFFSET + MAX_TOP_K
    last = searcher.search("apple", MAX_TOP_K, MAX_OFFSET, None, ())
    assert [p.source_id for p in last] == seen[MAX_OFFSET:]
    assert searcher.search("apple", 5, -7, None, ()) == searcher.search("apple", 5, 0, None, ())
