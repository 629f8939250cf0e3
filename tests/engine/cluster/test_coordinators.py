"""Two coordinators on one sharded corpus (a service holding it open while a loader in
another process writes): each one's searches see what the other committed, as two
``Corpus`` objects on one directory do."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import CorpusConfig, Document
from tests.support.cluster_fakes import hash_factory

pytest.importorskip("ray")

from engine.cluster import ShardedCorpus


def test_a_coordinator_searches_what_another_one_wrote(ray_cluster: None, tmp_path: Path) -> None:
    """Regression: a shard answered its coordinator's windows without following the
    other process's commits, so the store held the document (``fetch_source`` found it)
    and neither arm ranked it until this shard wrote something itself."""
    first = ShardedCorpus.create(tmp_path, CorpusConfig(name="c"), 2, embedder_factory=hash_factory)
    try:
        first.add([Document(id=f"d{i}", text=f"alpha bravo {i}") for i in range(6)])
        assert "new" not in {p.source_id for p in first.search("kumquat")}
        second = ShardedCorpus.open(tmp_path, embedder_factory=hash_factory)
        try:
            second.add([Document(id="new", text="kumquat charlie")])
            second.delete(["d1"])
        finally:
            second.close()
        assert first.fetch_source("new") is not None
        found = first.search("kumquat")
        assert (found[0].source_id, found[0].ranks.sparse) == ("new", 1)
        assert "d1" not in {p.source_id for p in first.search("alpha", top_k=20)}
    finally:
        first.close()
