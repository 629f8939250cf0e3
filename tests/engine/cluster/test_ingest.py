"""Distributed ingest through Ray Data: every document lands on its shard with a vector,
bad lines are counted not fatal, and a second run resumes (skips what is stored)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine import CorpusConfig
from tests.support.cluster_fakes import FIELDS, hash_factory, sample_documents

pytest.importorskip("ray.data")

from engine.cluster import ShardedCorpus
from engine.cluster.ingest import ingest
from engine.cluster.wire import to_row

DOCS = sample_documents(60)


def write_jsonl(path: Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for doc in DOCS:
            row = to_row(doc)
            row["fields"] = {k: str(v) if k == "day" else v for k, v in row["fields"].items()}
            fh.write(json.dumps(row) + "\n")
        fh.write(json.dumps({"id": "bad id with spaces", "text": "rejected"}) + "\n")


def test_ingest_embeds_writes_and_resumes(ray_cluster: None, tmp_path: Path) -> None:
    source = tmp_path / "docs.jsonl"
    write_jsonl(source)
    corpus = ShardedCorpus.create(
        tmp_path / "c",
        CorpusConfig(name="ingested", fields=FIELDS),
        2,
        embedder_factory=hash_factory,
    )
    try:
        seen: list[int] = []
        bars: list[bool] = []  # the process's Ray Data progress flag, while the ingest runs

        def progressed(written: int) -> None:
            seen.append(written)
            bars.append(DataContext.get_current().enable_progress_bars)

        from ray.data import DataContext

        before = DataContext.get_current().enable_progress_bars
        report = ingest(
            corpus,
            source,
            embed_actors=1,
            batch_size=16,
            embedder_factory=hash_factory,
            progress=False,
            on_progress=progressed,
        )
        assert (report.written, report.rejected, report.skipped) == (len(DOCS), 1, 0)
        assert seen and seen[-1] == len(DOCS)
        # Review: progress=False switched the bars off for the whole process (and two
        # ingests at once left them off); it is set on the ingest's own dataset now.
        assert set(bars) == {before} and DataContext.get_current().enable_progress_bars == before
        stats = corpus.stats()
        assert stats["documents"] == stats["vectors"] == len(DOCS)
        assert stats["degraded"] == 0
        top = corpus.search("roses compost garden", top_k=3)
        assert top and top[0].ranks.dense is not None
        again = ingest(
            corpus, source, embed_actors=1, embedder_factory=hash_factory, progress=False
        )
        assert (again.written, again.skipped, again.rejected) == (0, len(DOCS), 1)
        assert len(corpus) == len(DOCS)
        # The next export rewords one document and makes another non-public: a resumed
        # run embeds only the reworded one, and both changes land.
        reworded, hidden = DOCS[0].id, DOCS[1].id
        rows = [json.loads(line) for line in source.read_text("utf-8").splitlines()]
        for row in rows:
            if row["id"] == reworded:
                row["text"] = "an entirely new wording about orchids"
            if row["id"] == hidden:
                row["access_groups"] = ["staff"]
        source.write_text("".join(json.dumps(row) + "\n" for row in rows), "utf-8")
        third = ingest(
            corpus, source, embed_actors=1, embedder_factory=hash_factory, progress=False
        )
        assert (third.written, third.skipped, third.rejected) == (1, len(DOCS) - 1, 1)
        assert corpus.fetch_source(reworded).text == "an entirely new wording about orchids"
        assert hidden not in {hit.source_id for hit in corpus.search(DOCS[1].text, top_k=50)}
        assert corpus.stats()["vectors"] == len(DOCS)
    finally:
        corpus.close()
