"""A sharded corpus's life: closing refuses new calls and waits for those in flight, a
failed create leaves nothing behind, and a shard marked down is always probed again."""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine import CorpusConfig, Document, InvalidArgument, StorageError
from tests.support.cluster_fakes import broken_factory, down_factory, hash_factory

pytest.importorskip("ray")

from engine.cluster import ClusterError, ClusterOptions, ShardedCorpus
from engine.cluster.health import ClusterMetrics, Operation, ShardHealth

GENEROUS_S = 60.0
DOCS = [Document(id=f"d{i}", text=f"alpha bravo {i}") for i in range(12)]


def test_a_closed_corpus_refuses_every_call_at_once(ray_cluster: None, tmp_path: Path) -> None:
    """Regression: after close, search answered [] (or raised RuntimeError with global
    statistics), health said every shard was up, and len or fetch_source re-sent their
    call to the killed shards for the whole read timeout."""
    corpus = ShardedCorpus.create(
        tmp_path, CorpusConfig(name="c"), 2, embedder_factory=hash_factory
    )
    corpus.add(DOCS)
    assert len(corpus.search("alpha")) == 10
    server = corpus.serve_metrics()
    assert 'tandem_shards_up{corpus="c"} 2.0' in _scrape(server.url)
    corpus.close()
    # Review: the server kept serving, the shards "up"; it stops with the corpus now.
    assert not server.running
    calls: list[Callable[[], object]] = [
        corpus.serve_metrics,
        lambda: corpus.search("alpha"),
        lambda: len(corpus),
        lambda: corpus.fetch_source("d1"),
        lambda: corpus.grep("alpha"),
        corpus.stats,
        corpus.health,
        lambda: corpus.add(DOCS[:1]),
        lambda: corpus.delete(["d1"]),
    ]
    for call in calls:
        with pytest.raises(StorageError, match="is closed"):
            call()
    corpus.close()  # a second close does nothing


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=GENEROUS_S) as answer:
        return str(answer.read().decode())


def test_close_waits_for_the_calls_in_flight(ray_cluster: None, tmp_path: Path) -> None:
    """Regression: close killed the shards under searches and adds in flight, which then
    answered [] or failed part-way."""
    corpus = ShardedCorpus.create(
        tmp_path, CorpusConfig(name="c"), 1, embedder_factory=hash_factory
    )
    corpus.add(DOCS)
    inside, leave = threading.Event(), threading.Event()
    searcher = corpus._searcher
    real_search = searcher.search

    def parked_search(*args: Any, **kwargs: Any) -> Any:
        inside.set()
        leave.wait(GENEROUS_S)
        return real_search(*args, **kwargs)

    searcher.search = parked_search  # type: ignore[method-assign]
    answers: list[object] = []
    search = threading.Thread(target=lambda: answers.append(corpus.search("alpha")))
    search.start()
    assert inside.wait(GENEROUS_S)
    closing = threading.Thread(target=corpus.close)
    closing.start()
    closing.join(0.2)
    assert closing.is_alive()  # waiting for the search in flight
    leave.set()
    search.join(GENEROUS_S)
    closing.join(GENEROUS_S)
    assert not closing.is_alive()
    assert len(answers) == 1 and isinstance(answers[0], list) and len(answers[0]) == 10


def test_a_create_whose_shards_fail_leaves_nothing_and_can_be_retried(
    ray_cluster: None, tmp_path: Path
) -> None:
    """Regression: the manifest and shard folders stayed, a retry was refused as
    ClusterExists, and the failure surfaced as a raw Ray error."""
    root = tmp_path / "c"
    with pytest.raises(ClusterError, match="did not start"):
        ShardedCorpus.create(root, CorpusConfig(name="c"), 2, embedder_factory=broken_factory)
    assert list(root.iterdir()) == []
    corpus = ShardedCorpus.create(root, CorpusConfig(name="c"), 2, embedder_factory=hash_factory)
    try:
        corpus.add(DOCS)
        assert len(corpus) == len(DOCS)
    finally:
        corpus.close()


def test_a_create_over_leftover_shard_folders_is_refused(ray_cluster: None, tmp_path: Path) -> None:
    """Regression: with cluster.json deleted, a create with new fields silently adopted
    the old shards' documents and config."""
    root = tmp_path / "c"
    corpus = ShardedCorpus.create(root, CorpusConfig(name="c"), 2, embedder_factory=hash_factory)
    try:
        corpus.add(DOCS)
    finally:
        corpus.close()
    (root / "cluster.json").unlink()
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    fields = CorpusConfig(name="c", fields={"author": "keyword"})
    with pytest.raises(InvalidArgument, match=re.escape(f"{root} is not empty (it holds shards)")):
        ShardedCorpus.create(root, fields, 2, embedder_factory=hash_factory)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing touched
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "notes.txt").write_text("mine")
    with pytest.raises(InvalidArgument, match=r"notes\.txt"):
        ShardedCorpus.create(stray, fields, 2, embedder_factory=hash_factory)
    assert [p.name for p in stray.iterdir()] == ["notes.txt"]


def test_a_shard_marked_down_after_the_prober_decided_to_stop_is_probed_again() -> None:
    """Regression: a mark_down while the probing thread had decided to stop (but had not
    yet returned) started no new prober, and the shard stayed down for good."""
    answers_from: set[int] = set()
    probed = threading.Event()

    def probe(indexes: list[int], timeout_s: float) -> dict[int, str]:
        probed.set()
        return {i: "incarnation" for i in indexes if i in answers_from}

    health = ShardHealth(
        "c", 2, ClusterMetrics(), probe, probe_interval_s=0.01, probe_timeout_s=1.0
    )
    try:
        answers_from.add(0)
        health.mark_down(0, Operation.SEARCH)  # comes back at once: the prober stops
        _wait(lambda: health.is_up(0) and health._prober is None)
        answers_from.discard(0)
        health.mark_down(0, Operation.SEARCH)
        assert health._prober is not None  # a new prober, whatever the old one was doing
        answers_from.add(0)
        _wait(lambda: health.is_up(0))
        assert probed.is_set()
    finally:
        health.close()


def _wait(condition: Callable[[], bool]) -> None:
    deadline = threading.Event()
    for _ in range(int(GENEROUS_S / 0.01)):
        if condition():
            return
        deadline.wait(0.01)
    raise AssertionError("condition not met in time")


def test_a_create_failing_after_its_shards_started_stops_them(
    ray_cluster: None, tmp_path: Path
) -> None:
    """Regression: a failure after the shards answered (here the coordinator's metrics
    clash with a registry already holding them) left detached shards running under the
    uid of a manifest the cleanup had deleted — nothing could find or stop them."""
    import ray

    from engine.cluster import ClusterOptions
    from engine.cluster.health import ClusterMetrics as Metrics

    registry = Metrics().registry  # the coordinator's series are taken already
    with pytest.raises(ValueError, match="Duplicated"):
        ShardedCorpus.create(
            tmp_path / "c",
            CorpusConfig(name="leaky"),
            2,
            embedder_factory=hash_factory,
            options=ClusterOptions(detached=True),
            registry=registry,
        )
    assert list((tmp_path / "c").iterdir()) == []
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)]
    assert not [n for n in names if n.startswith("leaky-")]


def test_a_placement_no_node_can_satisfy_is_named_when_the_start_gives_up(
    ray_cluster: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A resource no node has makes Ray wait for one to join (an autoscaler may add it),
    so it is no error at once; but a typo waited the whole start timeout in silence and
    then said only that the shards did not start."""
    root = tmp_path / "c"
    with pytest.raises(ClusterError, match="no node has the resource\\(s\\) no-such-node"):
        ShardedCorpus.create(
            root,
            CorpusConfig(name="c", embedder=None),
            1,
            placement=["no-such-node"],
            options=ClusterOptions(start_timeout_s=2),
        )
    assert "no-such-node" in caplog.text  # said before the wait, too
    assert list(root.iterdir()) == []


@pytest.mark.parametrize("reserved", ["CPU", "GPU", "memory", "object_store_memory", "TPU"])
def test_a_placement_named_after_a_resource_of_rays_own_is_refused_first(
    tmp_path: Path, reserved: str
) -> None:
    """Review: Ray refuses its own resource names as custom ones, with a bare ValueError
    once the directory was made (the CLI printed a traceback and left it behind)."""
    root = tmp_path / "c"
    with pytest.raises(InvalidArgument, match=f"{reserved} is Ray's own"):
        ShardedCorpus.create(
            root, CorpusConfig(name="c", embedder=None), 2, placement=[reserved, "disk-1"]
        )
    assert not root.exists()


@pytest.mark.parametrize("cpus", [float("inf"), float("nan")])
def test_a_shard_cpu_count_ray_cannot_schedule_is_refused_by_the_options(cpus: float) -> None:
    """Review: infinity passed the options and then failed in Ray with an OverflowError."""
    with pytest.raises(ValueError, match="shard_num_cpus"):
        ClusterOptions(shard_num_cpus=cpus)


def test_a_shard_whose_directory_is_gone_is_not_restarted_empty(
    ray_cluster: None, tmp_path: Path
) -> None:
    """Review: an open (or a restart) whose shard directory was missing — an unmounted
    volume, a moved folder — made a new, empty corpus there and reported every shard up:
    that shard's documents vanished from every answer and new writes split it."""
    root = tmp_path / "c"
    corpus = ShardedCorpus.create(root, CorpusConfig(name="c"), 2, embedder_factory=hash_factory)
    corpus.add(DOCS)
    corpus.close()
    shard = root / "shards" / "001"
    assert shard.is_dir()
    shard.rename(tmp_path / "unmounted")
    with pytest.raises(ClusterError, match="did not start") as failed:
        ShardedCorpus.open(root, embedder_factory=hash_factory)
    assert "ShardMissing: shard 1: no corpus 'c'" in str(failed.value)
    assert not (shard / "corpora").exists()  # nothing made in its place
    (tmp_path / "unmounted").rename(shard)
    back = ShardedCorpus.open(root, embedder_factory=hash_factory)
    try:
        assert len(back) == len(DOCS)
    finally:
        back.close()


def test_supplied_vectors_of_another_length_are_refused_whoever_would_hold_them(
    ray_cluster: None, tmp_path: Path
) -> None:
    """Review: the coordinator did not check supplied vectors' length; while the provider
    was down (so no shard could say its model's length), a shard holding no vector yet
    took any length, and the corpus held vectors of two (every later add to that shard
    refused)."""
    import numpy as np

    from engine.cluster.routing import shard_for

    root = tmp_path / "c"
    on_zero = [d for d in DOCS if shard_for(d.id, 2) == 0][:3]
    on_one = [Document(id=f"x{i}", text="kilo lima") for i in range(40)]
    on_one = [d for d in on_one if shard_for(d.id, 2) == 1][:3]
    assert on_zero and on_one
    made = ShardedCorpus.create(root, CorpusConfig(name="c"), 2, embedder_factory=hash_factory)
    made.add(on_zero)  # shard 0 holds 64-value vectors; shard 1 none
    made.close()
    corpus = ShardedCorpus.open(root, embedder_factory=down_factory)  # the provider is down
    try:
        wrong = np.ones((len(on_one), 72), dtype=np.float32)
        with pytest.raises(InvalidArgument, match="dimension"):
            corpus.add(on_one, embeddings=wrong)
        assert len(corpus) == len(on_zero)  # nothing sent anywhere
        corpus.add(on_one, embeddings=np.ones((len(on_one), 64), dtype=np.float32))
        assert {i.dimension for i in corpus.shard_info() if i is not None} == {64}
    finally:
        corpus.close()
