"""Synthetic scale corpora (deterministic, Zipfian, unit vectors) and a tiny scale run."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bench.scale.measure import recall_at_k
from bench.scale.run import ScaleConfig, render_scale, run_scale
from bench.scale.synth import make_corpus, queries, query_vectors, vectors, vocabulary


def test_same_seed_same_corpus_other_seed_other_corpus() -> None:
    a = make_corpus(300, seed=1).documents()
    assert a == make_corpus(300, seed=1).documents()
    assert a != make_corpus(300, seed=2).documents()
    assert [d.doc_id for d in a[:3]] == ["s0", "s1", "s2"]


def test_word_frequencies_follow_the_vocabulary_rank() -> None:
    corpus = make_corpus(2_000, seed=3)
    counts = Counter(w for d in corpus.documents() for w in d.text.split())
    top = corpus.vocabulary[0]
    assert counts.most_common(1)[0][0] == top
    assert counts[top] > 5 * counts[corpus.vocabulary[50]] > 0  # Zipf: rank 1 ≫ rank 51


def test_vocabulary_is_distinct_words() -> None:
    words = vocabulary(seed=5, size=1_000)
    assert len(set(words)) == 1_000 and all(w.isalpha() for w in words)


def test_vectors_are_unit_rows_and_deterministic() -> None:
    corpus = make_corpus(500, seed=4)
    m = vectors(corpus, dim=16)
    assert m.shape == (500, 16) and m.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(m, vectors(corpus, dim=16))
    q = query_vectors(7, seed=4, dim=16)
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)


def test_queries_are_two_to_four_known_words() -> None:
    corpus = make_corpus(100, seed=6)
    known = set(corpus.vocabulary)
    texts = queries(corpus, 50)
    assert len(texts) == 50
    assert all(2 <= len(t.split()) <= 4 and set(t.split()) <= known for t in texts)
    with pytest.raises(ValueError):
        queries(corpus, 0)


def test_recall_at_k_hand_computed() -> None:
    truth = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    found = np.array([[4, 3, 9, 9], [5, 6, 7, -1]])
    assert recall_at_k(truth, found) == pytest.approx((2 + 3) / 8)
    with pytest.raises(ValueError):
        recall_at_k(truth, found[:1])


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        ScaleConfig(sizes=())
    with pytest.raises(ValueError):
        ScaleConfig(sizes=(10,))


def test_tiny_scale_run_writes_jsonl_markdown_and_plot(tmp_path: Path) -> None:
    config = ScaleConfig(sizes=(300,), n_queries=20, out_dir=tmp_path, tandem=False, progress=False)
    rows = run_scale(config)
    assert len(rows) == 1
    row = rows[0]
    assert row["n_docs"] == 300
    assert 0.0 < row["hnsw_recall_at_10"] <= 1.0
    assert row["keyword_p50_ms"] > 0 and row["flat_p50_ms"] > 0
    assert row["raw_peak_rss_mib"] > 10
    line = json.loads((tmp_path / "scale.jsonl").read_text().splitlines()[0])
    assert line["config"]["tandem"] is False and line["revision"]
    assert "| 300 |" in (tmp_path / "scale.md").read_text()
    assert (tmp_path / "scale.png").read_bytes()[:4] == b"\x89PNG"


def test_render_marks_missing_cells() -> None:
    text = render_scale([{"n_docs": 1000.0}], {"revision": "r", "timestamp": "t"})
    assert "| 1,000 | – |" in text
