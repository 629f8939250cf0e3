"""Reciprocal rank fusion: hand-computed tables, properties and argument validation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fusion import FusedHit, FusionError, rrf

IDS = [f"d{n:02d}" for n in range(12)]
"""A small id pool, so that generated rankings overlap and repeat ids."""

ranking_st = st.lists(st.sampled_from(IDS), max_size=15)
rankings_st = st.lists(ranking_st, max_size=5)
k_st = st.one_of(st.integers(min_value=1, max_value=1000), st.floats(min_value=0.5, max_value=1000))
limit_st = st.one_of(st.none(), st.integers(min_value=0, max_value=20))


def dedup(ranking: Sequence[str]) -> list[str]:
    """The documented dedup rule, written independently: first occurrence wins."""
    seen: list[str] = []
    for doc_id in ranking:
        if doc_id not in seen:
            seen.append(doc_id)
    return seen


def expected_ranks(rankings: Sequence[Sequence[str]], doc_id: str) -> tuple[int | None, ...]:
    out: list[int | None] = []
    for ranking in rankings:
        unique = dedup(ranking)
        out.append(unique.index(doc_id) + 1 if doc_id in unique else None)
    return tuple(out)


def exact_score(ranks: Sequence[int | None], k: Fraction, weights: Sequence[Fraction]) -> Fraction:
    return sum(
        (w / (k + r) for w, r in zip(weights, ranks, strict=True) if r is not None),
        start=Fraction(0),
    )


def order_key(hit: FusedHit) -> tuple[float, int, tuple[float, ...], str]:
    """The documented order, written independently: score, best rank, ranks in argument
    order (absent last), id."""
    ranks = tuple(math.inf if r is None else r for r in hit.ranks)
    return (-hit.score, min(r for r in hit.ranks if r is not None), ranks, hit.id)


# --- hand-computed tables -------------------------------------------------------------

F = Fraction


@pytest.mark.parametrize(
    ("rankings", "k", "weights", "expected"),
    [
        pytest.param(
            [["a", "b", "c"], ["b", "d"], ["c", "a"]],
            60,
            None,
            [
                # a and b tie exactly (1/61 + 1/62) and both have best rank 1: id decides.
                ("a", F(1, 61) + F(1, 62), (1, None, 2)),
                ("b", F(1, 62) + F(1, 61), (2, 1, None)),
                ("c", F(1, 63) + F(1, 61), (3, None, 1)),
                ("d", F(1, 62), (None, 2, None)),
            ],
            id="k60-three-arms",
        ),
        pytest.param(
            [["a", "b", "c"], ["c", "b"]],
            60,
            [2.0, 0.5],
            [
                # 2.5/62 ≈ 0.04032 > 2/63 + 0.5/61 ≈ 0.03994 > 2/61 ≈ 0.03279
                ("b", F(2, 62) + F(1, 2) / 62, (2, 2)),
                ("c", F(2, 63) + F(1, 2) / 61, (3, 1)),
                ("a", F(2, 61), (1, None)),
            ],
            id="k60-weighted",
        ),
        pytest.param(
            # k = 1: z = 1/2 (rank 1), m = 1/2 (rank 1), a = 1/4 + 1/4 (best rank 3),
            # p = r = 1/3 (rank 2). Scores tie exactly; best rank, then the first
            # ranking's rank (z and p are in it, m and r are not) break the ties.
            [["z", "p", "a"], ["m", "r", "a"]],
            1,
            None,
            [
                ("z", F(1, 2), (1, None)),
                ("m", F(1, 2), (None, 1)),
                ("a", F(1, 4) + F(1, 4), (3, 3)),
                ("p", F(1, 3), (2, None)),
                ("r", F(1, 3), (None, 2)),
            ],
            id="k1-tie-breaks",
        ),
        pytest.param(
            # Repeats are dropped and later ids move up: b is rank 2 in arm 0, not 3.
            # 1/61 + 1/63 ≈ 0.032266 just beats 2/62 ≈ 0.032258.
            [["a", "a", "b"], ["x", "b", "b", "a"]],
            60,
            None,
            [
                ("a", F(1, 61) + F(1, 63), (1, 3)),
                ("b", F(1, 62) + F(1, 62), (2, 2)),
                ("x", F(1, 61), (None, 1)),
            ],
            id="k60-duplicates",
        ),
    ],
)
def test_hand_computed_table(
    rankings: list[list[str]],
    k: float,
    weights: list[float] | None,
    expected: list[tuple[str, Fraction, tuple[int | None, ...]]],
) -> None:
    hits = rrf(rankings, k=k, weights=weights)

    assert [hit.id for hit in hits] == [doc_id for doc_id, _, _ in expected]
    for hit, (doc_id, score, ranks) in zip(hits, expected, strict=True):
        assert hit.ranks == ranks, doc_id
        assert hit.score == pytest.approx(float(score), rel=1e-15, abs=0), doc_id


def test_documented_example_scores() -> None:
    hits = rrf([["a", "b"], ["b", "a"]])

    assert [(h.id, h.ranks) for h in hits] == [("a", (1, 2)), ("b", (2, 1))]
    assert hits[0].score == hits[1].score == pytest.approx(1 / 61 + 1 / 62)


def test_default_k_is_sixty() -> None:
    assert rrf([["a"]])[0].score == pytest.approx(1 / 61)
    assert rrf([["a"]], k=2)[0].score == pytest.approx(1 / 3)


def test_fused_hit_is_frozen() -> None:
    hit = rrf([["a"]])[0]
    with pytest.raises(AttributeError):
        hit.score = 1.0  # type: ignore[misc]


def test_edge_shapes() -> None:
    assert rrf([]) == []
    assert rrf([[], []]) == []
    assert rrf([["a", "b"]], limit=0) == []
    assert [h.id for h in rrf([["a", "b", "c"]], limit=2)] == ["a", "b"]
    assert rrf((("a",), ("a",)))[0].ranks == (1, 1)  # tuples are rankings too
    assert rrf([["a"]], weights=[0.0]) == [FusedHit("a", 0.0, (1,))]


# --- properties -----------------------------------------------------------------------


@given(rankings=rankings_st, k=k_st, limit=limit_st)
def test_ids_are_the_union_of_the_inputs_up_to_limit(
    rankings: list[list[str]], k: float, limit: int | None
) -> None:
    union = {doc_id for ranking in rankings for doc_id in ranking}
    hits = rrf(rankings, k=k, limit=limit)
    ids = [hit.id for hit in hits]

    assert len(ids) == len(set(ids))
    if limit is None:
        assert set(ids) == union
    else:
        assert len(ids) == min(limit, len(union))
        assert set(ids) <= union
        assert hits == rrf(rankings, k=k)[:limit]


@given(
    rankings=rankings_st,
    k=k_st,
    weights=st.lists(st.floats(min_value=0, max_value=10), min_size=5, max_size=5),
)
def test_order_is_score_then_best_rank_then_ranks_then_id(
    rankings: list[list[str]], k: float, weights: list[float]
) -> None:
    hits = rrf(rankings, k=k, weights=weights[: len(rankings)])

    scores = [hit.score for hit in hits]
    assert scores == sorted(scores, reverse=True)
    assert hits == sorted(hits, key=order_key)


@given(
    rankings=rankings_st,
    k=st.integers(min_value=1, max_value=1000),
    weights=st.lists(st.integers(min_value=0, max_value=5), min_size=5, max_size=5),
)
def test_ranks_and_scores_are_reported_correctly(
    rankings: list[list[str]], k: int, weights: list[int]
) -> None:
    arm_weights = weights[: len(rankings)]
    hits = rrf(rankings, k=k, weights=[float(w) for w in arm_weights])

    for hit in hits:
        assert hit.ranks == expected_ranks(rankings, hit.id)
        exact = exact_score(hit.ranks, Fraction(k), [Fraction(w) for w in arm_weights])
        # fsum-rounded terms: within a few ulps of the exact rational score.
        assert math.isclose(hit.score, float(exact), rel_tol=1e-14, abs_tol=0)


@given(rankings=rankings_st, k=k_st, data=st.data())
def test_permuting_the_arms_permutes_only_the_ranks(
    rankings: list[list[str]], k: float, data: st.DataObject
) -> None:
    order = data.draw(st.permutations(range(len(rankings))))
    permuted = [rankings[i] for i in order]

    before = rrf(rankings, k=k)
    after = rrf(permuted, k=k)

    # Scores never change; exact ties may reorder (the first ranking breaks them).
    assert {h.id: h.score for h in after} == {h.id: h.score for h in before}
    ranks_before = {h.id: h.ranks for h in before}
    assert {h.id: h.ranks for h in after} == {
        doc_id: tuple(ranks[i] for i in order) for doc_id, ranks in ranks_before.items()
    }
    assert after == sorted(after, key=order_key)


@given(
    rankings=rankings_st,
    weights=st.lists(st.floats(min_value=0, max_value=10), min_size=5, max_size=5),
    data=st.data(),
)
def test_permuting_arms_with_their_weights_changes_nothing(
    rankings: list[list[str]], weights: list[float], data: st.DataObject
) -> None:
    arm_weights = weights[: len(rankings)]
    order = data.draw(st.permutations(range(len(rankings))))

    before = rrf(rankings, weights=arm_weights)
    after = rrf([rankings[i] for i in order], weights=[arm_weights[i] for i in order])

    assert {h.id: h.score for h in after} == {h.id: h.score for h in before}
    assert after == sorted(after, key=order_key)


@given(rankings=rankings_st, k=st.integers(min_value=1, max_value=1000), data=st.data())
def test_an_arm_ranking_a_document_first_never_lowers_it(
    rankings: list[list[str]], k: int, data: st.DataObject
) -> None:
    target = data.draw(st.sampled_from(IDS))
    rest = data.draw(st.lists(st.sampled_from(IDS), max_size=15))
    new_arm = [target, *rest]

    before = rrf(rankings, k=k)
    after = rrf([*rankings, new_arm], k=k)

    ids_before = [h.id for h in before]
    ids_after = [h.id for h in after]
    score_before = next((h.score for h in before if h.id == target), 0.0)
    score_after = next(h.score for h in after if h.id == target)
    assert score_after > score_before
    # Nothing that was behind the target (or new) overtakes it.
    ahead_after = set(ids_after[: ids_after.index(target)])
    if target in ids_before:
        ahead_before = set(ids_before[: ids_before.index(target)])
        assert ahead_after <= ahead_before
        assert ids_after.index(target) <= ids_before.index(target)
    else:
        assert ahead_after <= set(ids_before)


@given(
    ranking=ranking_st, k=k_st, empties_before=st.integers(0, 2), empties_after=st.integers(0, 2)
)
def test_a_single_non_empty_arm_yields_its_own_order(
    ranking: list[str], k: float, empties_before: int, empties_after: int
) -> None:
    rankings: list[list[str]] = [[] for _ in range(empties_before)]
    rankings += [ranking] + [[] for _ in range(empties_after)]

    hits = rrf(rankings, k=k)

    assert [h.id for h in hits] == dedup(ranking)
    assert [h.ranks[empties_before] for h in hits] == list(range(1, len(hits) + 1))


@given(rankings=rankings_st, k=k_st, position=st.integers(min_value=0, max_value=5))
def test_an_empty_arm_contributes_nothing(
    rankings: list[list[str]], k: float, position: int
) -> None:
    at = min(position, len(rankings))
    with_empty = [*rankings[:at], [], *rankings[at:]]

    before = rrf(rankings, k=k)
    after = rrf(with_empty, k=k)

    assert [(h.id, h.score) for h in after] == [(h.id, h.score) for h in before]
    assert [h.ranks for h in after] == [(*h.ranks[:at], None, *h.ranks[at:]) for h in before]


@given(ranking=ranking_st, k=k_st, weight=st.floats(0, 10), limit=limit_st)
def test_one_ranking_fuses_as_it_does_beside_an_empty_one(
    ranking: list[str], k: float, weight: float, limit: int | None
) -> None:
    """One ranking alone takes a shortcut (its order is the fused order); beside an empty
    ranking it takes the general path: ids, scores and ranks must agree exactly."""
    alone = rrf([ranking], k=k, weights=[weight], limit=limit)
    general = rrf([ranking, []], k=k, weights=[weight, 1.0], limit=limit)
    assert [(h.id, h.score, h.ranks) for h in alone] == [
        (h.id, h.score, (h.ranks[0],)) for h in general
    ]


# --- validation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "k", [0, -1, -0.5, math.nan, math.inf, -math.inf, True, "60", None, 2**1100]
)
def test_invalid_k_is_rejected(k: object) -> None:
    with pytest.raises(FusionError, match=r"\bk\b"):
        rrf([["a"]], k=k)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ([1.0], "one entry per ranking"),
        ([1.0, 1.0, 1.0], "one entry per ranking"),
        ([1.0, -0.1], r"weights\[1\]"),
        ([math.nan, 1.0], r"weights\[0\]"),
        ([1.0, math.inf], r"weights\[1\]"),
        ([1.0, "2"], r"weights\[1\]"),
        ([1.0, 2**1100], r"weights\[1\]"),  # past float's range: not an OverflowError
        ("ab", "not a str"),
    ],
)
def test_invalid_weights_are_rejected(weights: object, message: str) -> None:
    with pytest.raises(FusionError, match=message):
        rrf([["a"], ["b"]], weights=weights)  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [-1, 1.5, True, "3"])
def test_invalid_limit_is_rejected(limit: object) -> None:
    with pytest.raises(FusionError, match="limit"):
        rrf([["a"]], limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize("rankings", ["abc", ["abc"], [["a"], "bc"]])
def test_a_bare_string_is_not_a_ranking(rankings: object) -> None:
    with pytest.raises(FusionError, match="str"):
        rrf(rankings)  # type: ignore[arg-type]


@pytest.mark.parametrize("rankings", [None, 5, [{"a", "b"}], [{"a": 1}], [["a"], 3]])
def test_an_unordered_or_missing_ranking_is_refused(rankings: object) -> None:
    """Regression: a set ranking fused in hash order, a mapping ranked its keys, and
    ``None`` failed with a TypeError from inside the function."""
    with pytest.raises(FusionError, match="ranking"):
        rrf(rankings)  # type: ignore[arg-type]


def test_fusion_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="k must be"):
        rrf([["a"]], k=0)
    assert issubclass(FusionError, ValueError)


def test_weights_for_no_rankings_must_be_empty() -> None:
    assert rrf([], weights=[]) == []
    with pytest.raises(FusionError, match="0 rankings"):
        rrf([], weights=[1.0])


def test_finite_arguments_that_overflow_are_a_fusion_error() -> None:
    """Regression: 1e308 weights with a tiny k summed past float's range and raised a bare
    OverflowError, which the contract does not name."""
    with pytest.raises(FusionError, match="overflow"):
        rrf([["a"], ["a"], ["a"]], weights=[1e308] * 3, k=1e-300)
    with pytest.raises(FusionError, match="overflow"):  # two arms: a plain sum went to inf
        rrf([["a"], ["a"]], weights=[1.7e308] * 2, k=1e-9)
    assert rrf([["a"], ["a"]], weights=[1e307] * 2, k=1.0)[0].score == pytest.approx(1e307)


def test_a_bad_weight_in_a_generator_is_named_and_rankings_may_be_a_generator() -> None:
    with pytest.raises(FusionError, match=r"weights\[1\] must be a finite number >= 0"):
        rrf([["a"], ["b"]], weights=(w for w in [1.0, -1.0]))
    fused = rrf(ranking for ranking in [["a", "b"], ["b"]])
    assert [(hit.id, hit.ranks) for hit in fused] == [("b", (2, 1)), ("a", (1, None))]
