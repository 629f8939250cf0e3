"""Pure parts of sharding: routing by a stable hash, merging arms by score, one fusion."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("ray")

from engine import CorpusConfig
from engine.cluster.merge import completed, fuse, merge_arm
from engine.cluster.routing import group_by_shard, jump_hash, shard_for
from engine.search.completion import extra_candidates, shard_extras
from engine.search.windows import ArmWindow, ScoredHit
from fusion import rrf, zscore_fusion


def hits(*pairs: tuple[str, float | None]) -> list[ScoredHit]:
    return [ScoredHit(doc_id, score) for doc_id, score in pairs]


def test_routing_is_stable_across_processes_and_versions() -> None:
    # Golden values: a change here would send every stored document to the wrong shard.
    assert [shard_for(f"doc-{i}", 4) for i in range(8)] == [0, 2, 0, 3, 3, 1, 3, 0]
    assert shard_for("p1", 4) == 0
    assert shard_for("ünïcode/id", 7) == 2
    assert shard_for("anything", 1) == 0


def test_routing_spreads_ids_evenly_and_growing_moves_few() -> None:
    counts = collections.Counter(shard_for(f"id-{i}", 4) for i in range(8_000))
    assert set(counts) == {0, 1, 2, 3}
    assert min(counts.values()) > 1_800
    moved = sum(shard_for(f"id-{i}", 4) != shard_for(f"id-{i}", 5) for i in range(8_000))
    assert 1_200 < moved < 2_000  # about 1/5, not the ~4/5 of a modulo hash


def test_group_by_shard_keeps_input_order() -> None:
    ids = [f"x{i}" for i in range(50)]
    groups = group_by_shard(ids, 3)
    assert sorted(p for g in groups.values() for p in g) == list(range(50))
    for index, positions in groups.items():
        assert positions == sorted(positions)
        assert all(shard_for(ids[p], 3) == index for p in positions)


@given(st.integers(min_value=0, max_value=2**64 - 1), st.integers(min_value=1, max_value=300))
def test_jump_hash_in_range(key: int, buckets: int) -> None:
    assert 0 <= jump_hash(key, buckets) < buckets


def test_merge_orders_by_score_across_shards() -> None:
    merged = merge_arm(
        [hits(("a", 9.0), ("b", 3.0)), hits(("c", 7.0), ("d", 1.0)), hits(("e", 5.0))], 10
    )
    assert [h.id for h in merged] == ["a", "c", "e", "b", "d"]
    assert [h.id for h in merge_arm([hits(("a", 9.0), ("b", 3.0)), hits(("c", 7.0))], 2)] == [
        "a",
        "c",
    ]


def test_one_shard_keeps_its_order_even_on_ties_and_odd_scores() -> None:
    single = hits(("z", 2.0), ("a", 2.0), ("m", 2.5), ("b", 1.0))  # not monotone: kept as is
    assert merge_arm([single], 10) == single


def test_ties_are_ordered_by_id_across_shards_as_on_one_node() -> None:
    """Each arm orders equal scores by id on one node (and so on each shard); the merge
    must too, or a sharded corpus ranks tied documents by which shard holds them."""
    merged = merge_arm(
        [hits(("x", 1.0), ("y", 1.0)), hits(("a", 1.0), ("z", 1.0)), hits(("b", 2.0))], 10
    )
    assert [h.id for h in merged] == ["b", "a", "x", "y", "z"]


def test_unscored_hits_come_after_scored_ones_interleaved() -> None:
    merged = merge_arm(
        [hits(("l1", None), ("l2", None)), hits(("s1", 0.5)), hits(("m1", None))], 10
    )
    assert [h.id for h in merged] == ["s1", "l1", "m1", "l2"]


def test_fusion_runs_once_over_the_global_rankings() -> None:
    """Not an RRF of per-shard RRFs: a shard's rank 1 is not the corpus's rank 1."""
    shard0 = (hits(("a", 9.0), ("b", 8.0)), hits(("b", 0.9), ("a", 0.1)))
    shard1 = (hits(("c", 8.5)), hits(("c", 0.95)))
    sparse = merge_arm([shard0[0], shard1[0]], 100)
    dense = merge_arm([shard0[1], shard1[1]], 100)
    fused = fuse(CorpusConfig(name="c"), sparse, dense, limit=10)
    expected = rrf([["a", "c", "b"], ["c", "b", "a"]], k=60, limit=10)
    assert fused == expected
    by_id = {f.id: f.ranks for f in fused}
    assert by_id["c"] == (2, 1)  # global ranks, not the shard's own (1, 1)


def test_keyword_fusion_reports_no_dense_rank() -> None:
    fused = fuse(CorpusConfig(name="c"), hits(("a", 2.0), ("b", 1.0)), None, limit=1)
    assert [(f.id, f.ranks[0]) for f in fused] == [("a", 1)]


def test_fusion_follows_the_corpus_config() -> None:
    """A z-score corpus fuses its global windows by z-score, as one corpus would."""
    sparse = hits(("a", 9.0), ("b", 8.9), ("c", 1.0))
    dense = hits(("c", 0.99), ("b", 0.2), ("a", 0.1))
    config = CorpusConfig(name="c", fusion={"kind": "zscore", "dense_weight": 0.5})
    fused = fuse(config, sparse, dense, limit=3)
    expected = zscore_fusion(
        [[("a", 9.0), ("b", 8.9), ("c", 1.0)], [("c", 0.99), ("b", 0.2), ("a", 0.1)]],
        weights=(0.5, 0.5),
        limit=3,
    )
    assert [f.id for f in fused] == [f.id for f in expected]


def _top(scores: dict[str, float], ids: list[str], limit: int) -> list[str]:
    return sorted(ids, key=lambda i: -scores[i])[:limit]


@given(
    st.integers(min_value=1, max_value=4),
    st.integers(min_value=1, max_value=8),
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.floats(min_value=0.01, max_value=30.0)),
            st.floats(min_value=-1.0, max_value=1.0),
        ),
        min_size=1,
        max_size=40,
    ),
)
def test_completion_sent_with_the_vector_round_equals_asking_the_owners(
    shards: int, window: int, docs: list[tuple[float | None, float]]
) -> None:
    """Shards that score their part of the extras in the vector round, before the global
    vector window is known (``shard_extras``), complete both arms exactly as asking each
    extra's owner after the merge would: same ids, same order."""
    ids = [f"d{n}" for n in range(len(docs))]
    # distinct scores (a tie's order is each shard's own, not what this compares)
    bm25 = {ids[n]: s + n * 1e-6 for n, (s, _) in enumerate(docs) if s is not None}
    cosine = {ids[n]: c + n * 1e-7 for n, (_, c) in enumerate(docs)}
    held = [[i for i in ids if shard_for(i, shards) == s] for s in range(shards)]
    keyword = [_top(bm25, [i for i in h if i in bm25], window) for h in held]
    vector = [_top(cosine, h, window) for h in held]
    sparse = merge_arm([hits(*((i, bm25[i]) for i in w)) for w in keyword], window)
    dense = merge_arm([hits(*((i, cosine[i]) for i in w)) for w in vector], window)
    in_sparse = {h.id for h in sparse}

    answers = []
    for s in range(shards):
        own = [i for i in keyword[s] if i in in_sparse]
        for_keyword, for_vector = shard_extras(vector[s], own)
        answers.append(
            (
                ArmWindow(ids=tuple(vector[s]), scores=tuple(cosine[i] for i in vector[s])),
                _window(bm25, [i for i in for_keyword if i in bm25]),
                _window(cosine, for_vector),
            )
        )
    got_sparse, got_dense = completed(sparse, dense, window, answers)

    for_keyword, for_vector = extra_candidates(
        [h.id for h in sparse], [h.id for h in dense], window
    )
    expected_sparse = [h.id for h in sparse] + _top(bm25, [i for i in for_keyword if i in bm25], 99)
    expected_dense = [h.id for h in dense] + _top(cosine, for_vector, 99)
    assert [h.id for h in got_sparse] == expected_sparse
    assert [h.id for h in got_dense] == expected_dense
    assert [h.score for h in got_dense] == [cosine[i] for i in expected_dense]


def _window(scores: dict[str, float], ids: list[str]) -> ArmWindow:
    best = _top(scores, ids, len(ids))
    return ArmWindow(ids=tuple(best), scores=tuple(scores[i] for i in best))
