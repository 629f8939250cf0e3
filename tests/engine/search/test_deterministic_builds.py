"""Same documents, same ranking: two builds of one corpus - documents added in another
order and batches, the keyword index written by 1 or 4 threads - answer every query
identically, ties included (equal scores are ordered by source id in both arms)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import sparse.tantivy_index as tantivy_index
from engine import CorpusConfig, Document, Passage, SearchEngine
from tests.support.fakes import HashEmbedder

WORDS = ["gannet", "cliff", "colony", "puffin", "storm", "nest", "tide", "kelp", "shore"]
DOCS = [  # 60 documents; groups of identical texts make exact ties in both arms
    Document(id=f"dup-{n:02d}", title="Gannet colony", text="gannets nest on the cliff")
    for n in range(12)
] + [
    Document(
        id=f"doc-{n:02d}",
        title=WORDS[n % 9],
        text=" ".join(WORDS[(n * j) % 9] for j in range(1, n % 6 + 2)),
    )
    for n in range(48)
]
QUERIES = ["gannet cliff", "puffin storm", "kelp on the shore", "nest", "tide colony kelp"]


def build(root: Path, seed: int, threads: int, fusion: str) -> list[list[Passage]]:
    docs = list(DOCS)
    random.Random(seed).shuffle(docs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tantivy_index, "_BULK_DOCS", 1)
        patch.setattr(tantivy_index, "_bulk_threads", lambda: threads)
        with SearchEngine(root, embedder_factory=lambda spec: HashEmbedder()) as engine:
            config = CorpusConfig.model_validate(
                {"name": "c", "embedder": "hash", "fusion": fusion}
            )
            corpus = engine.create_corpus(config)
            for start in range(0, len(docs), 7 + seed):
                corpus.add(docs[start : start + 7 + seed])
            return [corpus.search(query, top_k=15) for query in QUERIES]


@pytest.mark.parametrize("fusion", ["rrf", "zscore"])
def test_two_builds_answer_identically(tmp_path: Path, fusion: str) -> None:
    first = build(tmp_path / "one", seed=1, threads=1, fusion=fusion)
    second = build(tmp_path / "two", seed=2, threads=4, fusion=fusion)
    assert first == second
    gannets = [p.source_id for p in first[0] if p.source_id.startswith("dup-")]
    assert gannets == sorted(gannets)  # the twelve tied twins, in id order
