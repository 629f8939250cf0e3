"""Distributed ingest, row by row: a malformed precomputed vector rejects its row only,
and an id repeated within a batch keeps its last row, as ``Corpus.add`` does."""

from __future__ import annotations

import contextlib
import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from engine import CorpusConfig, Document
from engine.errors import InvalidArgument, SourceNotFound
from engine.surfaces.loaders import LineError
from tests.support.cluster_fakes import hash_factory
from tests.support.fakes import HashEmbedder

pytest.importorskip("ray.data")

from engine.cluster import ShardedCorpus
from engine.cluster import ingest as ingest_module
from engine.cluster.ingest import IngestReport, ingest
from engine.cluster.ingest_rows import checked_vector

EMBEDDER = HashEmbedder()
BAD_VECTORS: dict[str, Any] = {
    "short": [0.5] * 10,
    "long": [0.5] * 65,
    "strings": ["x"] * 64,
    "nan": [float("nan")] * 64,
    "infinite": [1.0] * 63 + [float("inf")],
    "float32 overflow": [1.0] * 63 + [1e300],
    "zeros": [0.0] * 64,
    "scalar": 5,
    "nested": [[0.5] * 64],
    "booleans": [True] * 64,
    "text": "0.5," * 64,
    "null": None,
}


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), "utf-8")


@contextlib.contextmanager
def _ingested(
    tmp_path: Path, source: Path, *, batch_size: int
) -> Iterator[tuple[ShardedCorpus, IngestReport]]:
    """A two-shard corpus with ``source`` ingested through its ``vec`` column."""
    corpus = ShardedCorpus.create(
        tmp_path / "c", CorpusConfig(name="vectors"), 2, embedder_factory=hash_factory
    )
    try:
        yield (
            corpus,
            ingest(
                corpus,
                source,
                embed_actors=1,
                batch_size=batch_size,
                vector_column="vec",
                embedding_model=EMBEDDER.name,
                progress=False,
            ),
        )
    finally:
        corpus.close()


def test_ingest_rejects_each_malformed_vector_and_writes_the_rest(
    ray_cluster: None, tmp_path: Path
) -> None:
    rows: list[dict[str, Any]] = []
    for n in range(40):
        rows.append(
            {"id": f"d{n}", "text": f"doc {n}", "vec": EMBEDDER.embed([f"doc {n}"])[0].tolist()}
        )
    bad_ids = []
    for n, vector in enumerate(BAD_VECTORS.values()):  # spread over the batches
        rows.insert(3 * n + 1, {"id": f"bad{n}", "text": "bad", "vec": vector})
        bad_ids.append(f"bad{n}")
    # A row refused for its document, not its vector, is named by its id too.
    rows.insert(5, {"id": "long", "title": "T" * 1_204, "text": "x", "vec": rows[0]["vec"]})
    bad_ids.append("long")
    source = tmp_path / "vectors.jsonl"
    _write_jsonl(source, rows)
    with _ingested(tmp_path, source, batch_size=16) as (corpus, report):
        assert (report.written, report.rejected, report.skipped) == (40, len(bad_ids), 0)
        assert sorted(r.split(":")[0] for r in report.rejections) == sorted(bad_ids)
        short = next(r for r in report.rejections if r.startswith("bad0:"))
        assert "10 numbers" in short and "64" in short
        assert any(r.startswith("long: title has 1204 characters") for r in report.rejections)
        stats = corpus.stats()
        assert stats["documents"] == stats["vectors"] == 40
        for bad in bad_ids:
            with pytest.raises(SourceNotFound):
                corpus.fetch_source(bad)


def test_ingest_rejects_vectors_uniformly_of_the_wrong_length(
    ray_cluster: None, tmp_path: Path
) -> None:
    source = tmp_path / "short.jsonl"
    _write_jsonl(source, [{"id": f"d{n}", "text": "x", "vec": [0.5] * 10} for n in range(20)])
    with _ingested(tmp_path, source, batch_size=8) as (corpus, report):
        assert (report.written, report.rejected) == (0, 20)
        assert len(corpus) == 0


def test_ingest_repeated_id_in_a_batch_keeps_the_last_row(
    ray_cluster: None, tmp_path: Path
) -> None:
    first = {"id": "x", "title": "T", "text": "version A about roses"}
    second = {"id": "x", "title": "T", "text": "version B about tulips"}
    corpus = ShardedCorpus.create(
        tmp_path / "c", CorpusConfig(name="repeated"), 2, embedder_factory=hash_factory
    )
    try:
        corpus.add([Document(id="x", title="T", text="version A about roses")])
        source = tmp_path / "repeated.jsonl"
        # The later row restores what is stored (so it would be skipped), the earlier
        # one changes it: the later row wins, as in Corpus.add.
        _write_jsonl(source, [second, {"id": "y", "text": "other"}, first])
        report = ingest(
            corpus, source, embed_actors=1, embedder_factory=hash_factory, progress=False
        )
        assert corpus.fetch_source("x").text == "version A about roses"
        assert (report.written, report.skipped, report.rejected) == (1, 1, 0)
        # And the other way round: the later row is the change.
        _write_jsonl(source, [first, second])
        report = ingest(
            corpus, source, embed_actors=1, embedder_factory=hash_factory, progress=False
        )
        assert corpus.fetch_source("x").text == "version B about tulips"
        assert (report.written, report.skipped, report.rejected) == (1, 0, 0)
        assert corpus.stats()["vectors"] == 2
    finally:
        corpus.close()


@pytest.mark.parametrize("name", sorted(BAD_VECTORS))
def test_checked_vector_refuses(name: str) -> None:
    with pytest.raises(LineError, match="'vec'"):
        checked_vector(BAD_VECTORS[name], "vec", 64)


def test_checked_vector_takes_numbers_of_the_length() -> None:
    assert checked_vector([1, 0.5] + [0] * 62, "vec", 64)[:2] == [1.0, 0.5]
    assert len(checked_vector([0.5] * 10, "vec", None)) == 10  # length unknown: any


def _part(ids: list[str]) -> pa.Table:
    payloads = [pickle.dumps({"id": i, "text": "x"}) for i in ids]
    return pa.table({"payload": pa.array(payloads, type=pa.binary())})


@pytest.mark.parametrize("kind", ["group", "row"])
def test_a_refusal_is_split_down_to_rows_only_when_it_names_a_row(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """A refusal of the whole group (both halves refused with its message) refuses every
    row in 3 shard calls; one about a row is split down to that row (1 + 2 log2 n)."""
    calls: list[list[str]] = []

    def add(
        handle: object, index: int, method: str, args: tuple[Any, ...], timeout_s: float
    ) -> None:
        ids = [row["id"] for row in args[0]]
        calls.append(ids)
        if kind == "group":
            raise InvalidArgument("embeddings have dimension 10; this corpus's have 64")
        if "d5" in ids:
            raise InvalidArgument("document 'd5': refused")

    monkeypatch.setattr(ingest_module, "_call_with_retry", add)
    monkeypatch.setattr(ingest_module.ray, "put", lambda value: value)
    ids = [f"d{n}" for n in range(16)]
    written, refused = ingest_module._send(_part(ids), None, [None], 1, None, 1.0)
    if kind == "group":
        assert (written, len(calls)) == (0, 3)
        assert refused == [f"{i}: embeddings have dimension 10; this corpus's have 64" for i in ids]
    else:
        assert (written, len(calls)) == (15, 9)
        assert refused == ["d5: document 'd5': refused"]


def test_vectors_of_no_known_length_are_refused_before_anything_is_written(
    ray_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A new corpus whose provider cannot say its dimension (down): each batch took its
    # own first vector's length and each empty shard the first it got — one corpus
    # held vectors of 64 and of 32 values, and writes to one shard were refused after.
    monkeypatch.setattr("engine.cluster.ingest.dimension_if_up", lambda embedder: None)
    source = tmp_path / "mixed.jsonl"
    rows = [{"id": f"a{n}", "text": "x", "vec": [0.5] * 64} for n in range(8)]
    _write_jsonl(source, rows + [{"id": f"b{n}", "text": "x", "vec": [0.5] * 32} for n in range(8)])
    corpus = ShardedCorpus.create(
        tmp_path / "c", CorpusConfig(name="vectors"), 2, embedder_factory=hash_factory
    )
    try:
        with pytest.raises(InvalidArgument, match="no vectors yet"):
            ingest(
                corpus, source, vector_column="vec", embedding_model=EMBEDDER.name, progress=False
            )
        assert len(corpus) == 0
    finally:
        corpus.close()
