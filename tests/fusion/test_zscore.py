"""Z-score fusion: hand-computed values, properties and argument validation."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion import FusedHit, FusionError, zscore_fusion

IDS = [f"d{n:02d}" for n in range(12)]
score_st = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False)
arm_st = st.lists(st.tuples(st.sampled_from(IDS), score_st), max_size=15)
arms_st = st.lists(arm_st, max_size=4)
weights_st = st.lists(st.floats(min_value=0, max_value=10), min_size=4, max_size=4)
limit_st = st.one_of(st.none(), st.integers(min_value=0, max_value=20))

relaxed = settings(deadline=None, max_examples=80)


def dedup(arm: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """The documented rule, written independently: an id's first occurrence wins."""
    seen: dict[str, float] = {}
    for doc_id, score in arm:
        if doc_id not in seen:
            seen[doc_id] = score
    return list(seen.items())


def reference(
    arms: Sequence[Sequence[tuple[str, float]]], weights: Sequence[float]
) -> dict[str, float]:
    """The documented formula with the statistics module (population std)."""
    unique = [dedup(arm) for arm in arms]
    ids = {doc_id for arm in unique for doc_id, _ in arm}
    total = 0.0
    fused = dict.fromkeys(ids, 0.0)
    for arm, weight in zip(unique, weights, strict=True):
        if not arm or weight == 0:
            continue
        total += weight
        values = [score for _, score in arm]
        mean, std = statistics.fmean(values), statistics.pstdev(values)
        z = {d: (s - mean) / std if std > 0 else 0.0 for d, s in arm}
        floor = min(z.values())
        for doc_id in ids:
            fused[doc_id] += weight * z.get(doc_id, floor)
    return {d: (s / total if total else 0.0) for d, s in fused.items()}


def order_key(hit: FusedHit) -> tuple[float, int, tuple[float, ...], str]:
    """As documented for rrf: score, best rank, ranks in argument order, id."""
    ranks = tuple(math.inf if r is None else r for r in hit.ranks)
    return (-hit.score, min(r for r in hit.ranks if r is not None), ranks, hit.id)


# --- hand-computed ----------------------------------------------------------------------


def test_two_arms_by_hand() -> None:
    # sparse scores 9, 6, 3 -> mean 6, std sqrt(6): z = +1.2247, 0, -1.2247
    # dense scores 0.8, 0.6 -> mean 0.7, std 0.1: z = +1, -1 (c missing: floor -1)
    sparse = [("a", 9.0), ("b", 6.0), ("c", 3.0)]
    dense = [("b", 0.8), ("a", 0.6)]
    hits = zscore_fusion([sparse, dense], weights=[0.25, 0.75])
    root6 = math.sqrt(6.0)
    expected = {
        "b": 0.25 * 0.0 + 0.75 * 1.0,
        "a": 0.25 * (3 / root6) + 0.75 * -1.0,
        "c": 0.25 * (-3 / root6) + 0.75 * -1.0,
    }
    assert [h.id for h in hits] == ["b", "a", "c"]
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.id], abs=1e-12)
    assert {h.id: h.ranks for h in hits} == {"a": (1, 2), "b": (2, 1), "c": (3, None)}


def test_score_gaps_count_where_rrf_sees_only_order() -> None:
    # Both arms rank x over y; the dense arm is far surer about z than the sparse arm is
    # about x. RRF would put x and z level; z-scores put z first.
    sparse = [("x", 10.0), ("z", 9.9), ("y", 0.0)]
    dense = [("z", 0.9), ("x", 0.2), ("y", 0.1)]
    assert zscore_fusion([sparse, dense])[0].id == "z"


def test_missing_from_an_arm_scores_that_arms_floor() -> None:
    hits = zscore_fusion([[("a", 2.0), ("b", 0.0)], [("c", 5.0), ("a", 1.0)]])
    by_id = {h.id: h.score for h in hits}
    # arm 0: a +1, b -1 ; arm 1: c +1, a -1 ; b misses arm 1 (-1), c misses arm 0 (-1)
    assert by_id == {"a": 0.0, "b": -1.0, "c": 0.0}
    assert [h.id for h in hits] == ["a", "c", "b"]  # a and c tie at 0: both rank 1 -> id


def test_no_spread_means_no_preference() -> None:
    flat = [("a", 3.0), ("b", 3.0)]
    hits = zscore_fusion([flat, [("b", 1.0), ("a", 0.0)]])
    assert [h.id for h in hits] == ["b", "a"]
    assert zscore_fusion([[("only", 7.0)]]) == [FusedHit("only", 0.0, (1,))]


def test_numpy_scores_are_accepted() -> None:
    arm: list[tuple[str, Any]] = [("a", np.float32(0.5)), ("b", np.float64(0.25))]
    assert [h.id for h in zscore_fusion([arm])] == ["a", "b"]


def test_zero_weights_keep_ids_and_fall_back_to_rank_order() -> None:
    hits = zscore_fusion([[("a", 1.0), ("b", 0.0)], [("c", 1.0)]], weights=[0.0, 0.0])
    assert [(h.id, h.score) for h in hits] == [("a", 0.0), ("c", 0.0), ("b", 0.0)]


# --- properties ---------------------------------------------------------------------------


@relaxed
@given(arms=arms_st, weights=weights_st, limit=limit_st)
def test_matches_the_reference_formula_and_order(
    arms: list[list[tuple[str, float]]], weights: list[float], limit: int | None
) -> None:
    w = weights[: len(arms)]
    hits = zscore_fusion(arms, weights=w, limit=limit)
    expected = reference(arms, w)
    assert len(hits) == (len(expected) if limit is None else min(limit, len(expected)))
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.id], rel=1e-9, abs=1e-9)
        for arm, rank in zip(arms, hit.ranks, strict=True):
            unique = [d for d, _ in dedup(arm)]
            assert rank == (unique.index(hit.id) + 1 if hit.id in unique else None)
    assert hits == sorted(hits, key=order_key)
    full = zscore_fusion(arms, weights=w)
    assert hits == full[: len(hits)]  # limit is a prefix


@relaxed
@given(arm=arm_st)
def test_one_arm_with_non_increasing_scores_keeps_its_order(arm: list[tuple[str, float]]) -> None:
    ordered = sorted(arm, key=lambda pair: -pair[1])
    hits = zscore_fusion([ordered])
    assert [h.id for h in hits] == [d for d, _ in dedup(ordered)]
    assert zscore_fusion([ordered, []]) == [FusedHit(h.id, h.score, (*h.ranks, None)) for h in hits]


@relaxed
@given(arms=arms_st, weights=weights_st)
def test_the_order_of_the_arms_changes_nothing_but_the_ranks_tuple(
    arms: list[list[tuple[str, float]]], weights: list[float]
) -> None:
    w = weights[: len(arms)]
    forward = zscore_fusion(arms, weights=w)
    backward = zscore_fusion(arms[::-1], weights=w[::-1])
    assert {h.id: h.score for h in forward} == {h.id: h.score for h in backward}
    assert {h.id: h.ranks for h in forward} == {h.id: h.ranks[::-1] for h in backward}
    assert backward == sorted(backward, key=order_key)


@relaxed
@given(
    arms=st.lists(
        st.lists(st.tuples(st.sampled_from(IDS), st.integers(-50, 50).map(float)), max_size=12),
        min_size=1,
        max_size=3,
    ),
    scale=st.sampled_from([0.5, 2.0, 8.0]),
    shift=st.sampled_from([-3.0, 0.0, 10.0]),
    weight_scale=st.sampled_from([0.1, 1.0, 4.0]),
)
def test_affine_changes_of_an_arms_scores_and_scaled_weights_change_nothing(
    arms: list[list[tuple[str, float]]], scale: float, shift: float, weight_scale: float
) -> None:
    base = {h.id: h.score for h in zscore_fusion(arms)}
    moved = [[(d, s * scale + shift) for d, s in arms[0]], *arms[1:]]
    weights = [weight_scale] * len(arms)
    changed = {h.id: h.score for h in zscore_fusion(moved, weights=weights)}
    assert changed.keys() == base.keys()
    for doc_id, score in base.items():
        assert changed[doc_id] == pytest.approx(score, rel=1e-9, abs=1e-9)


# --- validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arms", "weights", "limit"),
    [
        ([[("a", math.nan)]], None, None),
        ([[("a", math.inf)]], None, None),
        ([[("a", True)]], None, None),
        ([[("a", "1.0")]], None, None),
        ([[(1, 1.0)]], None, None),
        ([[("a", 1.0, 2.0)]], None, None),
        ([["ab"]], None, None),
        (["ab"], None, None),
        ("ab", None, None),
        ([[("a", 1.0)]], [1.0, 1.0], None),
        ([[("a", 1.0)]], [-1.0], None),
        ([[("a", 1.0)]], [math.nan], None),
        ([[("a", 1.0)]], None, -1),
        ([[("a", 1.0)]], None, 2.5),
        ([[("a", 1.0)]], None, True),
        # integers and fractions past float's range (float() raised OverflowError)
        ([[("a", 2**1100)]], None, None),
        ([[("a", Fraction(2**1100, 3))]], None, None),
        ([[("a", 1.0)]], [2**1100], None),
    ],
)
def test_invalid_arguments_raise_fusion_error(arms: object, weights: object, limit: object) -> None:
    with pytest.raises(FusionError):
        zscore_fusion(arms, weights=weights, limit=limit)  # type: ignore[arg-type]


def test_fusion_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        zscore_fusion([[("a", math.nan)]])


def test_tiny_and_huge_spreads_are_standardised_not_flattened() -> None:
    """Regression (found by hypothesis): squaring a 1e-274 deviation underflowed to a
    zero std, so the arm's ranking was dropped; squaring 1e200 overflowed."""
    for a, b in ((9.61655284241959e-274, 0.0), (1e200, -1e200)):
        hits = zscore_fusion([[("a", a), ("b", b)]])
        assert [(h.id, h.score) for h in hits] == [("a", 1.0), ("b", -1.0)]


@pytest.mark.parametrize(
    ("rankings", "weights"),
    [
        ([[("a", 1.7e308), ("b", 1.7e308), ("c", 0.0)]], None),
        ([[("a", 2.0), ("b", 1.0)], [("b", 2.0), ("a", 1.0)]], [1e308, 1e308]),
        # a weight times a z-score went to inf without any sum raising
        (
            [[("a", 10.0), ("b", 0.0), ("c", 0.0), ("d", 0.0)], [("a", 1.0), ("b", 1.0)]],
            [1.7e308, 1.0],
        ),
    ],
)
def test_finite_arguments_that_overflow_are_a_fusion_error(
    rankings: list[list[tuple[str, float]]], weights: list[float] | None
) -> None:
    """Regression: finite scores or weights whose sums pass float's range raised a bare
    OverflowError, which the contract does not name."""
    with pytest.raises(FusionError, match="overflow"):
        zscore_fusion(rankings, weights=weights)
