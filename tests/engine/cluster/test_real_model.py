"""The real model on a small corpus: one shard answers exactly like one corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from dense.local import SentenceTransformerEmbedder
from engine import CorpusConfig, SearchEngine
from tests.support.cluster_fakes import FIELDS, QUERIES, MiniLMFactory, sample_documents

pytest.importorskip("ray")

from engine.cluster import ShardedCorpus

DOCS = sample_documents(150)


def test_one_shard_with_the_real_model_matches_one_corpus(
    ray_cluster: None, shared_minilm: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    cache = str(tmp_path / "onnx")
    factory = MiniLMFactory(cache)
    vectors = shared_minilm.embed([f"{d.title}\n{d.text}" for d in DOCS])
    config = CorpusConfig(name="real", fields=FIELDS)
    with SearchEngine(tmp_path / "single", embedder_factory=factory) as engine:
        single = engine.create_corpus(config)
        single.add(DOCS, embeddings=vectors, embedding_model="all-MiniLM-L6-v2")
        sharded = ShardedCorpus.create(tmp_path / "sharded", config, 1, embedder_factory=factory)
        try:
            sharded.add(DOCS, embeddings=vectors, embedding_model="all-MiniLM-L6-v2")
            for query in QUERIES:
                expected = single.search(query, top_k=20)
                got = sharded.search(query, top_k=20)
                assert [(p.source_id, p.ranks) for p in got] == [
                    (p.source_id, p.ranks) for p in expected
                ], query
                assert all(p.ranks.dense is not None for p in got[:3])
            # vectors of another model are refused
            with pytest.raises(ValueError, match="refused"):
                sharded.add(DOCS[:1], embeddings=vectors[:1], embedding_model="all-mpnet-base-v2")
        finally:
            sharded.close()
