"""The paired test between two systems' per-query scores: properties that must hold for any
scores (hypothesis), degenerate inputs, determinism and the sizes of the draws."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.significance import PERMUTATIONS, RESAMPLES, SEED, PairedTest, paired_test

SCORE = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
SMALL = {"resamples": 500, "permutations": 500}
"""Fewer draws where a property holds whatever their number (keeps the tests quick)."""


@st.composite
def paired_scores(draw: st.DrawFn, min_size: int = 1) -> tuple[dict[str, float], dict[str, float]]:
    """Two systems' nDCG@10 on the same queries."""
    n = draw(st.integers(min_value=min_size, max_value=40))
    a = {f"q{i}": draw(SCORE) for i in range(n)}
    b = {f"q{i}": draw(SCORE) for i in range(n)}
    return a, b


def spread(test: PairedTest) -> float:
    return max(1.0, abs(test.ci_low), abs(test.ci_high)) * 1e-12


def test_defaults_are_the_documented_draws() -> None:
    assert (RESAMPLES, PERMUTATIONS, SEED) == (10_000, 10_000, 0)


@settings(max_examples=60, deadline=None)
@given(paired_scores())
def test_swapping_the_systems_negates_the_mean_mirrors_the_ci_and_keeps_p(
    scores: tuple[dict[str, float], dict[str, float]],
) -> None:
    a, b = scores
    forward, backward = paired_test(a, b, **SMALL), paired_test(b, a, **SMALL)
    assert backward.mean_difference == -forward.mean_difference
    assert (backward.ci_low, backward.ci_high) == (-forward.ci_high, -forward.ci_low)
    assert backward.p_value == forward.p_value
    assert backward.n_queries == forward.n_queries == len(a)


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=4), SCORE, min_size=1, max_size=30))
def test_identical_systems_have_p_1_and_a_zero_ci(scores: dict[str, float]) -> None:
    test = paired_test(scores, dict(scores))
    assert test == PairedTest(len(scores), 0.0, 0.0, 0.0, 1.0)
    assert test.ci_contains_zero


@settings(max_examples=40, deadline=None)
@given(
    st.lists(SCORE, min_size=12, max_size=60),
    st.floats(min_value=0.05, max_value=1.0),
    st.booleans(),
)
def test_a_constant_shift_on_every_query_is_significant(
    base: list[float], shift: float, ahead: bool
) -> None:
    b = {f"q{i}": v for i, v in enumerate(base)}
    a = {q: v + shift for q, v in b.items()}
    test = paired_test(a, b) if ahead else paired_test(b, a)
    assert test.p_value < 0.01
    assert not test.ci_contains_zero
    assert (test.ci_low > 0) is ahead and (test.ci_high < 0) is not ahead
    assert abs(test.mean_difference) == pytest.approx(shift)


@settings(max_examples=60, deadline=None)
@given(paired_scores())
def test_the_ci_contains_the_mean_difference_and_p_is_a_probability(
    scores: tuple[dict[str, float], dict[str, float]],
) -> None:
    test = paired_test(*scores, **SMALL)
    slack = spread(test)
    assert test.ci_low - slack <= test.mean_difference <= test.ci_high + slack
    assert test.ci_low <= test.ci_high
    assert 1 / (SMALL["permutations"] + 1) <= test.p_value <= 1.0


@settings(max_examples=30, deadline=None)
@given(paired_scores(), st.integers(min_value=0, max_value=2**32 - 1))
def test_same_input_same_output_whatever_the_mapping_order(
    scores: tuple[dict[str, float], dict[str, float]], seed: int
) -> None:
    a, b = scores
    reordered = dict(reversed(list(a.items())))
    first = paired_test(a, b, seed=seed, **SMALL)
    assert paired_test(a, b, seed=seed, **SMALL) == first
    assert paired_test(reordered, b, seed=seed, **SMALL) == first


def test_the_default_test_is_reproducible_and_the_seed_matters() -> None:
    rng = random.Random(7)
    a = {f"q{i}": rng.random() for i in range(200)}
    b = {q: min(1.0, max(0.0, v + rng.gauss(0.0, 0.2))) for q, v in a.items()}
    first = paired_test(a, b)
    assert paired_test(a, b) == first
    other = paired_test(a, b, seed=SEED + 1)
    assert other != first  # the draws really come from the seed
    assert other.mean_difference == first.mean_difference


def test_only_the_common_queries_are_paired() -> None:
    a = {"q1": 0.9, "q2": 0.5, "only-a": 0.0}
    b = {"q1": 0.4, "q2": 0.5, "only-b": 1.0}
    test = paired_test(a, b)
    assert test.n_queries == 2
    assert test.mean_difference == pytest.approx(0.25)


def test_a_difference_on_one_query_of_many_is_not_significant() -> None:
    b = {f"q{i}": 0.5 for i in range(100)}
    a = {**b, "q0": 1.0}
    test = paired_test(a, b)
    assert test.mean_difference == pytest.approx(0.005)
    assert test.p_value == 1.0  # every sign flip leaves |mean| at 0.005
    assert test.ci_low == 0.0 and test.ci_contains_zero


def test_p_matches_the_exact_sign_flip_distribution_on_a_small_case() -> None:
    # Differences 0.1, 0.2, 0.3, 0.4: of the 16 sign patterns, |sum| >= 1.0 only for the
    # two where every sign agrees, so the exact two-sided p is 2/16.
    b = {f"q{i}": 0.0 for i in range(4)}
    a = {f"q{i}": 0.1 * (i + 1) for i in range(4)}
    test = paired_test(a, b)
    assert test.p_value == pytest.approx(2 / 16, abs=0.015)


def test_no_common_query_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="share no query"):
        paired_test({"q1": 0.5}, {"q2": 0.5})
    with pytest.raises(ValueError, match="share no query"):
        paired_test({}, {})


def test_non_finite_scores_and_empty_draws_are_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        paired_test({"q": float("nan")}, {"q": 0.5})
    with pytest.raises(ValueError, match="positive"):
        paired_test({"q": 0.1}, {"q": 0.5}, resamples=0)
