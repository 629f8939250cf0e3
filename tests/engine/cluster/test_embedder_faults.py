"""Embedder trouble never fails a sharded corpus, as it never fails one corpus.

When the embedder is down or answers with output no corpus can use (NaN, infinite or
zero rows, too few rows, a 1-D array, another length than the corpus's vectors), a
search answers from keywords and an add or an ingest stores the documents
keyword-searchable and degraded; the trouble shows in metrics only, never as an error
or in an answer.

Ray-free where the coordinator's parts can run over in-process shard bodies
(``ShardActor``): the searcher and the writer. With Ray: the coordinator's guard (a model
whose length changed under its name) and the Ray Data ingest.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from ray.exceptions import GetTimeoutError

from engine import CorpusConfig, Document
from engine.cluster import writes
from engine.cluster.calls import Pending, ShardCalls
from engine.cluster.errors import ShardUnavailable
from engine.cluster.health import ClusterMetrics, Operation
from engine.cluster.routing import shard_for
from engine.cluster.search import ShardedSearcher
from engine.cluster.shard import ShardActor, ShardSpec
from engine.cluster.wire import to_row
from engine.cluster.writes import CorpusDimension, ShardWriter
from engine.dimension_guard import DimensionGuard
from engine.errors import InvalidArgument
from engine.search.strategy import FallbackReason
from tests.engine.cluster.faulty_embedders import FaultyFactory, FaultyHashEmbedder
from tests.support.cluster_fakes import (
    FIELDS,
    AllUp,
    InlineCalls,
    hash_factory,
    in_process_shards,
    sample_documents,
)
from tests.support.fakes import HashEmbedder

SHARDS = 2
DOCS = sample_documents(60)
CONFIG = CorpusConfig.model_validate({"name": "faults", "fields": FIELDS})
QUERIES = ("password reset", "roses compost garden", "collection item")


class TolerantCalls(InlineCalls):
    """``InlineCalls`` that treat a shard's exception as ``ShardCalls.collect`` does (the
    shard is left out of the round, nothing is raised), and can fail every call of the
    methods in ``failing``."""

    def __init__(self, shards: Sequence[ShardActor], failing: frozenset[str] = frozenset()):
        super().__init__(shards)
        self.failing = failing
        self.errors: list[tuple[str, str]] = []

    def submit(
        self, indexes: Sequence[int], method: str, args: Callable[[int], tuple[Any, ...]]
    ) -> Pending:
        answers: list[Any] = []
        for i in indexes:
            try:
                if method in self.failing:
                    raise RuntimeError(f"{method} failed (test)")
                answers.append(getattr(self.shards[i], method)(*args(i)))
            except Exception as exc:
                self.errors.append((method, type(exc).__name__))
                answers.append(exc)
        return Pending(method, list(indexes), answers)

    def collect(self, pending: Pending, timeout_s: float, operation: object = None) -> dict:
        return {
            i: answer
            for i, answer in zip(pending.indexes, pending.refs, strict=True)
            if not isinstance(answer, Exception)
        }


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ShardActor]]:
    """Two in-process shards holding ``DOCS`` with 64-dimension hash vectors."""
    with in_process_shards(tmp_path_factory.mktemp("faults"), CONFIG, DOCS, SHARDS) as bodies:
        yield bodies


def searcher(
    shards: list[ShardActor], embedder: Any, calls: InlineCalls | None = None
) -> tuple[ShardedSearcher, ClusterMetrics]:
    metrics = ClusterMetrics(CollectorRegistry())
    found = ShardedSearcher(
        CONFIG,
        SHARDS,
        None if embedder is None else DimensionGuard(embedder, lambda: None),  # as opened
        calls if calls is not None else TolerantCalls(shards),  # type: ignore[arg-type]
        AllUp(SHARDS),  # type: ignore[arg-type]
        metrics,
        timeout_s=30.0,
    )
    return found, metrics


def fallbacks(metrics: ClusterMetrics, reason: FallbackReason) -> float:
    value = metrics.registry.get_sample_value(
        "tandem_search_fallbacks_total", {"corpus": CONFIG.name, "reason": reason.value}
    )
    return value or 0.0


def ids(passages: Sequence[Any]) -> list[str]:
    return [p.source_id for p in passages]


@pytest.mark.parametrize("mode", ["nan", "inf", "zero", "flat"])
def test_a_query_vector_no_shard_can_use_answers_from_keywords(
    shards: list[ShardActor], mode: str
) -> None:
    """Regression: the coordinator sent a NaN, infinite or zero query vector to every
    shard, every vector round failed (ValueError in the shard) and the answer was empty
    — the keyword windows that had arrived thrown away. One corpus answers from keywords."""
    keyword, _ = searcher(shards, None)
    faulty, metrics = searcher(shards, FaultyHashEmbedder(mode))
    for n, query in enumerate(QUERIES, start=1):
        expected = ids(keyword.search(query, 5, 0, None, ()))
        assert expected
        answer = faulty.search(query, 5, 0, None, ())
        assert ids(answer) == expected
        assert all(p.ranks.dense is None for p in answer)
        assert fallbacks(metrics, FallbackReason.EMBEDDER_ERROR) == n


def test_keyword_windows_answer_when_every_vector_round_fails(shards: list[ShardActor]) -> None:
    """Safety net: a good query vector that every shard's vector round fails on still
    gets the answer its keyword windows make (as a keyword search ranks them), not []."""
    keyword, _ = searcher(shards, None)
    calls = TolerantCalls(shards, failing=frozenset({"vector_round"}))
    hybrid, metrics = searcher(shards, FaultyHashEmbedder("ok"), calls)
    for n, query in enumerate(QUERIES, start=1):
        answer = hybrid.search(query, 5, 0, None, ())
        assert ids(answer) == ids(keyword.search(query, 5, 0, None, ()))
        assert answer and all(p.ranks.dense is None for p in answer)
        assert fallbacks(metrics, FallbackReason.EMBEDDER_ERROR) == n
    assert {method for method, _ in calls.errors} == {"vector_round"}
    # A page past the fusion window: no second round with the vector either.
    calls.errors.clear()
    deep = hybrid.search("collection item", 5, 40, None, ())
    assert ids(deep) == ids(keyword.search("collection item", 5, 40, None, ()))
    assert len(calls.errors) == SHARDS  # one failed vector round per shard, not two


def test_a_search_while_the_embedder_is_down_counts_a_fallback(
    shards: list[ShardActor],
) -> None:
    down = FaultyHashEmbedder()
    down.down = True
    found, metrics = searcher(shards, down)
    assert found.search("password reset", 5, 0, None, ())
    assert fallbacks(metrics, FallbackReason.EMBEDDER_DOWN) == 1
    assert fallbacks(metrics, FallbackReason.EMBEDDER_ERROR) == 0


class DirectCalls:
    """``ShardCalls.call`` answered at once by in-process shard bodies."""

    def __init__(self, shards: Sequence[ShardActor]) -> None:
        self.shards = shards

    def call(self, index: int, method: str, *args: Any, timeout_s: float, operation: Any) -> Any:
        return getattr(self.shards[index], method)(*args)


@contextlib.contextmanager
def writer_over_bodies(
    tmp_path: Path, shard_mode: str, embedder: FaultyHashEmbedder
) -> Iterator[tuple[ShardWriter, list[ShardActor]]]:
    """A coordinator's writer over in-process shard bodies (no Ray: ``ray.put`` patched
    by the caller), each shard embedding with ``FaultyFactory(shard_mode)``, the corpus's
    vectors 64 values long."""
    bodies = [
        ShardActor(
            ShardSpec(i, str(tmp_path / f"{i:03d}"), CONFIG, FaultyFactory(shard_mode), create=True)
        )
        for i in range(SHARDS)
    ]
    try:
        writer = ShardWriter(
            CONFIG.name,
            SHARDS,
            DirectCalls(bodies),  # type: ignore[arg-type]
            embedder,
            write_batch=1_000,
            timeout_s=30.0,
            dimension=CorpusDimension(lambda: 64),
        )
        yield writer, bodies
    finally:
        for body in bodies:
            body.close()


@pytest.mark.parametrize("mode", ["nan", "inf", "zero", "short", "flat", "narrow", "down"])
def test_the_writer_stores_documents_degraded_when_the_output_is_unusable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Regression: ``ShardedCorpus.add`` sent the embedder's output unchecked — NaN,
    infinite or zero rows made a shard refuse the batch (InvalidArgument), too few rows
    or rows of another length raised ValueError, a 1-D array was broadcast to every
    document — and the whole batch was lost. One corpus stores such documents degraded."""
    monkeypatch.setattr(writes, "ray", types.SimpleNamespace(put=lambda rows: rows))
    # The shards' own embedder fails too (as the same provider would): what the
    # coordinator sends without vectors is stored degraded.
    with writer_over_bodies(tmp_path, "down", FaultyHashEmbedder(mode)) as (writer, bodies):
        docs = DOCS[:12]
        result = writer.add(docs, None, None, False)
        assert (result.added, result.degraded) == (len(docs), len(docs))
        stats = [body.stats() for body in bodies]
        assert sum(s["documents"] for s in stats) == len(docs)
        assert sum(s["vectors"] for s in stats) == 0
        assert sum(s["degraded"] for s in stats) == len(docs)


class _TimedOutHandle:
    """An actor handle whose every call is sent and never answered in time."""

    def __getattr__(self, method: str) -> Any:
        return types.SimpleNamespace(remote=lambda *args: object())


def test_a_read_that_times_out_is_not_told_to_be_sent_again_as_a_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: a read (``fetch_source``, ``grep``, ``len``) whose shard did not
    answer in time raised with a write's wording: 'not acknowledged (it may still apply:
    writes are idempotent, send it again)'."""
    from engine.cluster import calls as calls_module

    def get(ref: object, timeout: float) -> object:
        raise GetTimeoutError("timed out (test)")

    monkeypatch.setattr(calls_module, "ray", types.SimpleNamespace(get=get))
    metrics = ClusterMetrics(CollectorRegistry())
    calls = ShardCalls("c", [_TimedOutHandle()], AllUp(1), metrics)  # type: ignore[arg-type]
    with pytest.raises(ShardUnavailable) as read:
        calls.call(0, "fetch", "doc-1", timeout_s=30.0, operation=Operation.READ)
    message = str(read.value)
    assert "fetch" in message and "30 s" in message
    assert "acknowledged" not in message and "write" not in message
    assert read.value.shards == (0,)
    with pytest.raises(ShardUnavailable) as write:
        calls.call(0, "add", [], None, None, timeout_s=30.0, operation=Operation.WRITE)
    assert "not acknowledged" in str(write.value) and "send it again" in str(write.value)


def test_a_coordinator_whose_model_changed_length_stores_documents_degraded(
    ray_cluster: None, tmp_path: Path
) -> None:
    """Regression: the coordinator's embedder was not guarded. Its model re-pulled under
    the same name with another length (64 -> 32): ``add`` sent 32-value vectors that
    every shard holding 64-value ones refused (InvalidArgument: the batch lost). One
    corpus stores the documents degraded; a search answers from keywords and counts it."""
    from engine.cluster import ShardedCorpus

    root = tmp_path / "swap"
    corpus = ShardedCorpus.create(root, CONFIG, SHARDS, embedder_factory=hash_factory)
    try:
        corpus.add(DOCS)
    finally:
        corpus.close()
    corpus = ShardedCorpus.open(root, embedder_factory=FaultyFactory("swapped"))
    try:
        new = [Document(id=f"new-{i}", text=f"zeppelin hangar number {i}") for i in range(4)]
        result = corpus.add(new)
        assert (result.added, result.degraded) == (len(new), len(new))
        stats = corpus.stats()
        assert (stats["documents"], stats["degraded"]) == (len(DOCS) + len(new), len(new))
        assert {p.source_id for p in corpus.search("zeppelin hangar")} == {d.id for d in new}
        fell_back = corpus.registry.get_sample_value(
            "tandem_search_fallbacks_total",
            {"corpus": CONFIG.name, "reason": FallbackReason.EMBEDDER_ERROR.value},
        )
        assert fell_back == 1
    finally:
        corpus.close()


def test_ingest_writes_batches_the_embedder_fails_on_degraded(
    ray_cluster: None, tmp_path: Path
) -> None:
    """Regression: in ``tandem cluster load``, NaN or zero vectors from the embedding
    actors were rejected as bad input, and an embedder failing (EmbedderUnavailable)
    killed the whole job. Now such batches are written without vectors, degraded."""
    from engine.cluster import ShardedCorpus
    from engine.cluster.ingest import ingest

    # The shards' own embedder fails too: what arrives without vectors stays degraded.
    corpus = ShardedCorpus.create(
        tmp_path / "c", CONFIG, SHARDS, embedder_factory=FaultyFactory("down")
    )
    try:
        total = 0
        for mode in ("nan", "zero", "down"):
            source = tmp_path / f"{mode}.jsonl"
            rows = [
                {"id": f"{mode}-{i}", "title": "t", "text": f"lantern {mode} keeper {i}"}
                for i in range(6)
            ]
            source.write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
            report = ingest(
                corpus,
                source,
                embed_actors=1,
                batch_size=4,
                embedder_factory=FaultyFactory(mode),
                progress=False,
            )
            assert (report.written, report.rejected, report.skipped) == (len(rows), 0, 0), (
                mode,
                report.rejections,
            )
            total += len(rows)
            found = {p.source_id for p in corpus.search(f"lantern {mode} keeper", top_k=20)}
            assert {r["id"] for r in rows} <= found
        stats = corpus.stats()
        assert (stats["documents"], stats["degraded"], stats["vectors"]) == (total, total, 0)
    finally:
        corpus.close()


class HangingEmbedder(FaultyHashEmbedder):
    """The hash embedder, whose calls hang while ``hang`` is set (until released)."""

    def __init__(self) -> None:
        super().__init__("ok")
        self.hang = threading.Event()
        self.released = threading.Event()
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        if self.hang.is_set():
            self.released.wait(60)
        return super().embed(texts)


def test_a_query_embedding_past_its_deadline_answers_from_keywords(
    shards: list[ShardActor],
) -> None:
    """``ClusterOptions(query_embed_timeout_s=...)``: the coordinator waits that long for
    the query's vector, as one corpus does with ``query_embed_timeout``; while the late
    call runs, later searches do not call the embedder; hybrid resumes once it returns."""
    keyword, _ = searcher(shards, None)
    embedder = HangingEmbedder()
    metrics = ClusterMetrics(CollectorRegistry())
    hybrid = ShardedSearcher(
        CONFIG,
        SHARDS,
        DimensionGuard(embedder, lambda: None),
        TolerantCalls(shards),  # type: ignore[arg-type]
        AllUp(SHARDS),  # type: ignore[arg-type]
        metrics,
        timeout_s=30.0,
        query_embed_timeout_s=0.2,
    )
    try:
        assert any(
            p.ranks.dense is not None for p in hybrid.search("password reset", 5, 0, None, ())
        )
        embedder.hang.set()
        before = embedder.calls
        for n, query in enumerate(QUERIES, start=1):
            answer = hybrid.search(query, 5, 0, None, ())
            assert ids(answer) == ids(keyword.search(query, 5, 0, None, ()))
            assert all(p.ranks.dense is None for p in answer)
            assert fallbacks(metrics, FallbackReason.EMBEDDER_TIMEOUT) == n
        assert embedder.calls == before + 1  # the stuck call only: no thread per search
        embedder.hang.clear()
        embedder.released.set()
        deadline = time.monotonic() + 30  # the late call returns on its worker
        while time.monotonic() < deadline:
            answer = hybrid.search("password reset", 5, 0, None, ())
            if any(p.ranks.dense is not None for p in answer):
                break
            time.sleep(0.05)
        assert any(p.ranks.dense is not None for p in answer)
    finally:
        embedder.released.set()
        hybrid.close()


def test_a_shard_body_opened_without_create_on_an_empty_directory_refuses(
    tmp_path: Path,
) -> None:
    """Ray-free: only a create makes a shard's corpus; any other start of an empty shard
    directory is an error, and leaves no corpus behind."""
    from engine.cluster.shard import ShardMissing

    with pytest.raises(ShardMissing, match="refusing to start it empty"):
        ShardActor(ShardSpec(0, str(tmp_path / "000"), CONFIG, hash_factory))
    assert not (tmp_path / "000" / "corpora" / CONFIG.name).exists()
    made = ShardActor(ShardSpec(0, str(tmp_path / "000"), CONFIG, hash_factory, create=True))
    made.close()
    reopened = ShardActor(ShardSpec(0, str(tmp_path / "000"), CONFIG, hash_factory))
    reopened.close()


def test_an_empty_shard_does_not_embed_what_the_coordinator_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review: with a model re-pulled under its name with another length, the
    coordinator's guard refused its vectors and sent the documents without; a shard that
    held no vector yet embedded them itself with that model and kept them — the corpus
    held vectors of two lengths, and later adds to that shard were refused. The
    coordinator now tells every shard the corpus's length."""
    monkeypatch.setattr(writes, "ray", types.SimpleNamespace(put=lambda rows: rows))
    # The re-pulled model (32 values) on the coordinator and on the shards alike.
    swapped = FaultyHashEmbedder("swapped")
    with writer_over_bodies(tmp_path, "swapped", swapped) as (writer, bodies):
        docs = DOCS[:12]
        on_zero = [d for d in docs if shard_for(d.id, SHARDS) == 0]
        assert on_zero and len(on_zero) < len(docs)
        held = HashEmbedder().embed([d.text for d in on_zero])  # 64 values, the corpus's
        bodies[0].add([to_row(d) for d in on_zero], held, None, 64)
        rest = [d for d in docs if d not in on_zero]
        result = writer.add(rest, None, None, False)
        assert (result.added, result.degraded) == (len(rest), len(rest))
        assert [body.vector_dimension() for body in bodies] == [64, None]


def test_a_restarted_shard_holding_no_vector_repairs_at_the_corpus_length(
    ray_cluster: None, tmp_path: Path
) -> None:
    """Review: a shard restarted since its last write knew no vector length until a
    write told it, so ``repair`` right after an open let a shard holding no vector embed
    its degraded documents with a model re-pulled at another length — the corpus then
    held vectors of two lengths. The coordinator now tells every shard the length when
    it repairs, as when it writes: that shard keeps its documents degraded."""
    from engine.cluster import ShardedCorpus

    on_zero = [d for d in DOCS if shard_for(d.id, SHARDS) == 0]
    on_one = [d for d in DOCS if shard_for(d.id, SHARDS) == 1]
    assert on_zero and on_one
    root = tmp_path / "restarted"
    corpus = ShardedCorpus.create(root, CONFIG, SHARDS, embedder_factory=hash_factory)
    try:
        corpus.add(on_zero)  # shard 0: 64-value vectors; shard 1: nothing yet
    finally:
        corpus.close()
    corpus = ShardedCorpus.open(root, embedder_factory=FaultyFactory("down"))
    try:
        assert corpus.add(on_one).degraded == len(on_one)  # shard 1: degraded, no vector
    finally:
        corpus.close()
    corpus = ShardedCorpus.open(root, embedder_factory=FaultyFactory("swapped"))
    try:
        with pytest.raises(InvalidArgument, match="batch_size"):
            corpus.repair(0)
        assert corpus.repair() == 0
        stats = corpus.stats()
        assert stats["degraded"] == len(on_one)
        assert [s["vectors"] for s in stats["per_shard"]] == [len(on_zero), 0]
    finally:
        corpus.close()
    corpus = ShardedCorpus.open(root, embedder_factory=hash_factory)
    try:
        assert corpus.repair() == len(on_one)  # the corpus's own model heals them
        assert corpus.stats()["vectors"] == len(DOCS)
    finally:
        corpus.close()
