"""Quality figures come from ir-measures; one figure is checked against a hand computation."""

from __future__ import annotations

import math

import ir_measures
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ir_measures import nDCG

from bench.quality import evaluate, rounded


def test_ndcg_at_10_matches_a_hand_computed_value() -> None:
    # q1: relevant d1 (grade 2) and d2 (grade 1); the run ranks d3, d1, d2.
    # DCG  = 2/log2(3) + 1/log2(4)      (d1 at rank 2, d2 at rank 3; gain = grade)
    # IDCG = 2/log2(2) + 1/log2(3)         → 1.7619 / 2.6309 = 0.6697
    qrels = {"q1": {"d1": 2, "d2": 1}}
    run = {"q1": ["d3", "d1", "d2"]}
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    quality = evaluate(qrels, run)
    assert quality.ndcg_at_10 == pytest.approx(dcg / idcg, abs=1e-6)
    assert quality.ndcg_at_10 == pytest.approx(0.6697, abs=1e-4)
    assert quality.mrr_at_10 == pytest.approx(0.5)
    assert quality.recall_at_100 == pytest.approx(1.0)


def test_unanswered_queries_count_as_zero_not_dropped() -> None:
    qrels = {"q1": {"d1": 1}, "q2": {"d9": 1}}
    perfect_q1_only = {"q1": ["d1"], "q2": []}
    quality = evaluate(qrels, perfect_q1_only)
    assert quality.ndcg_at_10 == pytest.approx(0.5)
    assert quality.mrr_at_10 == pytest.approx(0.5)
    assert evaluate(qrels, {"q1": ["d1"]}).ndcg_at_10 == pytest.approx(0.5)


def test_mrr_stops_at_ten_and_recall_at_100() -> None:
    qrels = {"q": {"hit": 1, "deep": 1}}
    ranked = [f"x{i}" for i in range(10)] + ["hit"] + [f"y{i}" for i in range(80)] + ["deep"]
    quality = evaluate(qrels, {"q": ranked})
    assert quality.mrr_at_10 == 0.0
    assert quality.ndcg_at_10 == 0.0
    assert quality.recall_at_100 == pytest.approx(1.0)


def test_duplicate_ids_in_a_run_count_once() -> None:
    qrels = {"q": {"a": 1, "b": 1}}
    assert evaluate(qrels, {"q": ["a", "a", "b"]}) == evaluate(qrels, {"q": ["a", "b"]})


def test_queries_without_a_relevant_document_are_not_averaged() -> None:
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 0}}
    assert evaluate(qrels, {"q1": ["d1"], "q2": ["d2"]}).ndcg_at_10 == pytest.approx(1.0)


def test_no_relevant_document_at_all_is_an_error() -> None:
    with pytest.raises(ValueError):
        evaluate({"q": {"d": 0}}, {"q": ["d"]})


def test_as_dict_names() -> None:
    quality = evaluate({"q": {"d": 1}}, {"q": ["d"]})
    assert quality.as_dict() == {"ndcg@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0}


def test_per_query_ndcg_covers_every_judged_query_and_averages_to_the_mean() -> None:
    qrels = {"q1": {"d1": 2, "d2": 1}, "q2": {"d9": 1}, "q3": {"d3": 1}, "q4": {"d4": 0}}
    run = {"q1": ["d3", "d1", "d2"], "q3": ["d3"], "q4": ["d4"], "unjudged": ["d1"]}
    quality = evaluate(qrels, run)
    per_query = quality.per_query_ndcg_at_10
    assert set(per_query) == {"q1", "q2", "q3"}  # q4 has no relevant document
    assert per_query["q2"] == 0.0  # unanswered: 0, not dropped
    assert per_query["q3"] == pytest.approx(1.0)
    assert per_query["q1"] == pytest.approx(0.6697, abs=1e-4)
    assert sum(per_query.values()) / len(per_query) == pytest.approx(quality.ndcg_at_10)


DOC_IDS = [f"d{i}" for i in range(15)]


@st.composite
def judged_runs(draw: st.DrawFn) -> tuple[dict[str, dict[str, int]], dict[str, list[str]]]:
    """Random graded qrels (every query with a relevant document) and a run answering all."""
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, list[str]] = {}
    for i in range(draw(st.integers(min_value=1, max_value=8))):
        grades = draw(
            st.dictionaries(st.sampled_from(DOC_IDS), st.integers(0, 3), min_size=1, max_size=6)
        )
        relevant = draw(st.sampled_from(DOC_IDS))
        qrels[f"q{i}"] = {**grades, relevant: draw(st.integers(1, 3))}
        run[f"q{i}"] = draw(
            st.lists(st.sampled_from(DOC_IDS), min_size=1, max_size=15, unique=True)
        )
    return qrels, run


@settings(max_examples=60, deadline=None)
@given(judged_runs())
def test_per_query_ndcg_agrees_with_ir_measures(
    case: tuple[dict[str, dict[str, int]], dict[str, list[str]]],
) -> None:
    qrels, run = case
    quality = evaluate(qrels, run)
    scored = {q: {d: float(len(r) - k) for k, d in enumerate(r)} for q, r in run.items()}
    expected = {m.query_id: m.value for m in ir_measures.iter_calc([nDCG @ 10], qrels, scored)}
    assert quality.per_query_ndcg_at_10 == pytest.approx(expected)
    aggregate = ir_measures.calc_aggregate([nDCG @ 10], qrels, scored)[nDCG @ 10]
    assert quality.ndcg_at_10 == pytest.approx(aggregate)
    per_query = quality.per_query_ndcg_at_10
    assert sum(per_query.values()) / len(per_query) == pytest.approx(quality.ndcg_at_10)


def test_rounded_keeps_six_decimals() -> None:
    assert rounded({"q": 0.123456789, "r": 1.0}) == {"q": 0.123457, "r": 1.0}
