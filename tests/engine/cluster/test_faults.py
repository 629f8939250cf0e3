"""Kill a shard: searches answer from the others, writes wait for the restart (or fail
clearly), nothing acknowledged is lost, and the outage shows in ``tandem_shards_up``."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import CorpusConfig, Document
from tests.support.cluster_fakes import (
    FIELDS,
    GatedHashFactory,
    down_factory,
    hash_factory,
    sample_documents,
)

pytest.importorskip("ray")

from engine.cluster import ClusterOptions, ShardedCorpus, ShardUnavailable, shard_for

DOCS = sample_documents(90)
PUBLIC = {d.id for d in DOCS if d.is_public}
# Probe often; give a probe of a live shard time to answer on a loaded box (a killed or
# restarting shard is not waited for longer than this per probe).
FAST = {"probe_interval_s": 0.1, "probe_timeout_s": 5.0}
# How long a write/read waits for a shard. The shard killed for good (max_restarts=0) is
# waited for this long before ShardUnavailable — the time the dead-shard test spends on
# each such call — while the live shard must answer within it: 10 s, not 2 s.
DEAD_SHARD_WAIT_S = 10.0


def up(corpus: ShardedCorpus) -> float | None:
    """``tandem_shards_up`` as a scrape sees it (a scrape probes every shard first)."""
    return corpus.registry.get_sample_value("tandem_shards_up", {"corpus": corpus.name})


def kill(corpus: ShardedCorpus, index: int) -> None:
    info = corpus.shard_info()[index]
    assert info is not None
    os.kill(info.pid, signal.SIGKILL)


def wait_for(condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


@pytest.mark.parametrize("global_statistics", [False, True], ids=["own-stats", "global-stats"])
def test_shard_killed_during_searches_and_writes(
    ray_cluster: None, tmp_path: Path, global_statistics: bool
) -> None:
    """Also with global term statistics: a shard dying between (or during) the statistics
    round and the windows costs its documents, never an error."""
    gate = tmp_path / "hold-restarts"
    corpus = ShardedCorpus.create(
        tmp_path / "c",
        CorpusConfig(name="faults", fields=FIELDS),
        3,
        embedder_factory=GatedHashFactory(str(gate)),
        options=ClusterOptions(
            **FAST, write_timeout_s=120, global_term_statistics=global_statistics
        ),
    )
    errors: list[BaseException] = []
    searches = 0
    stop = threading.Event()

    def search_loop() -> None:
        nonlocal searches
        while not stop.is_set():
            try:
                for passage in corpus.search("collection item", top_k=200):
                    assert passage.source_id in PUBLIC or passage.source_id.startswith("late-")
                searches += 1
            except BaseException as exc:  # every search must answer
                errors.append(exc)

    try:
        corpus.add(DOCS)
        victim = 1
        on_victim = {d for d in PUBLIC if shard_for(d, 3) == victim}
        assert on_victim
        loop = threading.Thread(target=search_loop)
        loop.start()
        gate.touch()  # the restarted actor will wait in __init__: a deterministic outage
        kill(corpus, victim)
        wait_for(lambda: up(corpus) == 2)
        during = {p.source_id for p in corpus.search("collection item", top_k=200)}
        assert during == PUBLIC - on_victim  # answered from the other shards, no error
        at_outage = searches
        wait_for(lambda: searches > at_outage or bool(errors))  # answers while it is down

        # A write routed to the dead shard is not acknowledged until its shard has it.
        late = Document(
            id=next(f"late-{i}" for i in range(100) if shard_for(f"late-{i}", 3) == victim),
            text="late arrival",
        )
        done = threading.Event()
        writer = threading.Thread(target=lambda: (corpus.add([late]), done.set()))
        writer.start()
        time.sleep(1.0)
        assert not done.is_set()
        gate.unlink()  # let the shard come back
        writer.join(timeout=120)
        assert done.is_set()
        wait_for(lambda: up(corpus) == 3)
        recovered = searches
        wait_for(lambda: searches > recovered or bool(errors))  # and after the restart
        stop.set()
        loop.join(timeout=60)
        assert errors == []
        after = {p.source_id for p in corpus.search("collection item", top_k=200)}
        assert after == PUBLIC | {late.id}  # everything acknowledged is there
        assert len(corpus) == len(DOCS) + 1
        assert corpus.fetch_source(late.id).text == "late arrival"
        failures = corpus.registry.get_sample_value(
            "tandem_shard_failures_total", {"corpus": "faults", "operation": "search"}
        )
        assert failures is not None and failures >= 1
        restarts = corpus.registry.get_sample_value(
            "tandem_shard_restarts_total", {"corpus": "faults"}
        )
        assert restarts == 1
    finally:
        stop.set()
        gate.unlink(missing_ok=True)
        corpus.close()


def test_a_write_to_a_shard_that_stays_dead_fails_clearly(
    ray_cluster: None, tmp_path: Path
) -> None:
    corpus = ShardedCorpus.create(
        tmp_path / "c",
        CorpusConfig(name="dead", embedder=None, fields=FIELDS),
        2,
        embedder_factory=hash_factory,
        options=ClusterOptions(
            **FAST,
            max_restarts=0,
            write_timeout_s=DEAD_SHARD_WAIT_S,
            read_timeout_s=DEAD_SHARD_WAIT_S,
        ),
    )
    try:
        corpus.add(DOCS)
        kill(corpus, 0)
        wait_for(lambda: up(corpus) == 1)
        hits = corpus.search("collection item", top_k=200)
        assert {p.source_id for p in hits} == {d for d in PUBLIC if shard_for(d, 2) == 1}
        doomed = [Document(id=f"new-{i}", text="new") for i in range(20)]
        with pytest.raises(ShardUnavailable) as caught:
            corpus.add(doomed)
        assert caught.value.shards == (0,)
        # the documents of the live shard were stored; the dead shard's were not acknowledged
        for doc in doomed:
            if shard_for(doc.id, 2) == 1:
                assert corpus.fetch_source(doc.id).text == "new"
        with pytest.raises(ShardUnavailable):
            len(corpus)
    finally:
        corpus.close()


def test_an_add_while_the_embedder_is_down_stores_documents_degraded(
    ray_cluster: None, tmp_path: Path
) -> None:
    """As ``Corpus.add``: never an error, the documents keyword-searchable and counted."""
    corpus = ShardedCorpus.create(
        tmp_path / "down", CorpusConfig(name="down"), 2, embedder_factory=down_factory
    )
    try:
        docs = [Document(id=f"d{i}", text=f"parcel locker number {i}") for i in range(4)]
        result = corpus.add(docs)
        assert (result.added, result.degraded) == (4, 4)
        assert len(corpus) == 4
        assert {hit.source_id for hit in corpus.search("parcel locker")} == {d.id for d in docs}
    finally:
        corpus.close()
