"""Quality figures come from ir-measures; one figure is checked against a hand computation."""

from __future__ import annotations

import math

import pytest

from bench.quality import evaluate


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
