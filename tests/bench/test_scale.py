"""Synthetic scale corpora (deterministic, Zipfian text; realistic or random vectors) and a
tiny scale run."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bench.scale import realistic
from bench.scale.anchors import FIXTURE, Anchors, load_anchors
from bench.scale.measure import recall_at_k
from bench.scale.run import ScaleConfig, derive, render_scale, run_scale
from bench.scale.source import VectorSource, exact_top
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
    config = ScaleConfig(
        sizes=(300,),
        n_queries=20,
        out_dir=tmp_path,
        tandem=False,
        progress=False,
        realistic=False,
    )
    rows = run_scale(config)
    assert len(rows) == 1
    row = rows[0]
    assert row["n_docs"] == 300 and row["realistic_vectors"] == 0.0
    assert row["hnsw_recall_at_10"] == 1.0  # 300 vectors: the index answers exactly
    assert 0.0 < row["sq8_recall_at_10"] <= 1.0
    assert row["keyword_p50_ms"] > 0 and row["exact_p50_ms"] > 0
    assert row["raw_peak_rss_mib"] > 10 and row["dense-reopen-sq8_peak_rss_mib"] > 10
    assert row["float32_reopen_s"] > 0 and "raw_load_avg_start" in row
    line = json.loads((tmp_path / "scale.jsonl").read_text().splitlines()[0])
    assert line["config"]["tandem"] is False and line["revision"]
    assert line["realistic_vectors"] is False
    assert "| 300 |" in (tmp_path / "scale.md").read_text()
    assert (tmp_path / "scale.png").read_bytes()[:4] == b"\x89PNG"


def test_render_marks_missing_cells() -> None:
    text = render_scale([{"n_docs": 1000.0}], {"revision": "r", "timestamp": "t"})
    assert "| 1,000 | – |" in text


def test_derived_figures() -> None:
    row = {
        "interleaved_hybrid_p50_ms": 9.0,
        "embed_p50_ms": 4.0,
        "keyword_p50_ms": 1.0,
        "hnsw_p50_ms": 2.0,
        "raw_vectors_mib": 300.0,
        "tantivy_mib": 100.0,
        "reopen_peak_rss_mib": 500.0,
    }
    derive(row)
    assert row["hybrid_overhead_ms"] == pytest.approx(2.0)
    assert row["reopen_peak_rss_vs_raw"] == pytest.approx(1.25)


def clustered_anchors(seed: int = 0, n: int = 600, dim: int = 24) -> Anchors:
    """Stand-in real embeddings: unit vectors in 30 tight topics, queries near them."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((30, dim))
    docs = centres[rng.integers(0, 30, n)] + 0.3 * rng.standard_normal((n, dim))
    qs = centres[rng.integers(0, 30, 40)] + 0.5 * rng.standard_normal((40, dim))
    return Anchors(documents=_unit(docs), queries=_unit(qs), sources=("fake",))


def _unit(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    return out


def test_noise_matches_the_real_nearest_neighbour_gap() -> None:
    anchors = clustered_anchors()
    model = realistic.noise_model(anchors, spread=1.0)
    docs = anchors.documents
    nn = realistic.exact_neighbours(docs, 1)[:, 0]
    gap = float(np.mean(np.sum((docs[nn] - docs) ** 2, axis=1)))
    z = np.random.default_rng(1).standard_normal((20_000, docs.shape[1])).astype(np.float32)
    noise = model.scale * (z @ model.transform.T)
    assert float(np.mean(np.sum(noise**2, axis=1))) == pytest.approx(gap, rel=0.05)
    # half the spread, a quarter of the squared length
    half = realistic.noise_model(anchors, spread=0.5)
    assert half.scale == pytest.approx(model.scale / 2)


def test_realistic_vectors_are_unit_deterministic_and_near_their_anchors() -> None:
    anchors = clustered_anchors()
    model = realistic.noise_model(anchors)
    a = realistic.realistic_vectors(anchors, model, 1_000, seed=3)
    assert a.shape == (1_000, 24) and a.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(a, realistic.realistic_vectors(anchors, model, 1_000, seed=3))
    chunks = list(realistic.iter_vector_chunks(anchors, model, 1_000, seed=3, chunk=300))
    assert [c.shape[0] for c in chunks] == [300, 300, 300, 100]
    again = realistic.iter_vector_chunks(anchors, model, 1_000, seed=3, chunk=300)
    np.testing.assert_array_equal(np.vstack(chunks), np.vstack(list(again)))
    # every vector is much closer to some real vector than random directions would be
    best = (a @ anchors.documents.T).max(axis=1)
    assert float(np.median(best)) > 0.7
    q = realistic.real_queries(anchors, 50, seed=3)
    assert q.shape == (50, 24)
    assert {tuple(r) for r in q.tolist()} <= {tuple(r) for r in anchors.queries.tolist()}


def test_describe_reports_real_and_synthetic_neighbourhoods() -> None:
    anchors = clustered_anchors()
    model = realistic.noise_model(anchors)
    source = VectorSource(2_000, 5, anchors, model)
    matrix = source.matrix()
    probes = source.queries(20)
    labels, scores = exact_top(matrix, probes, 10)
    brute = np.argsort(-(probes @ matrix.T), axis=1, kind="stable")[:, :10]
    assert recall_at_k(brute, labels) == 1.0
    assert np.all(np.diff(scores, axis=1) <= 0)
    stats = source.describe(scores)
    assert set(stats) == {
        "real_doc_nn_cos",
        "real_query_top1_cos",
        "real_query_top10_cos",
        "synthetic_query_top1_cos",
        "synthetic_query_top10_cos",
    }
    assert all(-1.0 <= v <= 1.0 for v in stats.values())
    assert VectorSource(100, 5).describe(scores) == {}  # random vectors: nothing to compare


class FakeEncoder:
    """Hash-seeded unit vectors: stands in for the model when loading anchors."""

    model = "fake-model"
    dimension = 8

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, texts: list[str], progress: bool = False) -> np.ndarray:
        self.calls += 1
        seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little") for t in texts]
        return _unit(np.stack([np.random.default_rng(s).standard_normal(8) for s in seeds]))


def test_anchors_come_from_the_fixture_and_are_cached(tmp_path: Path) -> None:
    encoder = FakeEncoder()
    anchors = load_anchors("fake-model", None, tmp_path, encoder)  # type: ignore[arg-type]
    n_docs = sum(1 for line in (FIXTURE / "corpus.jsonl").open() if line.strip())
    assert anchors.sources == ("tandem-help",) and anchors.documents.shape == (n_docs, 8)
    assert anchors.queries.shape[0] > 10
    calls = encoder.calls
    again = load_anchors("fake-model", None, tmp_path, encoder)  # type: ignore[arg-type]
    assert encoder.calls == calls  # documents and queries both came from the cache
    np.testing.assert_array_equal(again.queries, anchors.queries)


def test_the_raw_dense_stage_measures_a_saved_graph_without_building_one(tmp_path: Path) -> None:
    """With a Tandem corpus in the scale point, the raw stage loads the graph that
    corpus saved (same vectors, same engine code) instead of building a second one."""
    from bench.scale.dense_stage import doc_ids, measure_dense
    from bench.scale.measure import Stage, stages_for
    from bench.scale.source import VectorSource
    from dense import FaissIndex

    source = VectorSource(400, seed=3)
    built = FaissIndex(source.dimension, hnsw_threshold=100, build_delay_s=0.0)
    built.add(doc_ids(0, 400), source.matrix())
    assert built.wait_for_graph(timeout=120)
    saved = tmp_path / "vectors.faiss"
    built.save(saved)
    built.close()
    out = measure_dense(source, 20, (64,), tmp_path, graph_file=saved)
    assert out["graph_from_tandem_corpus"] == 1.0
    assert out["hnsw_graph_serving"] == 1.0 and out["sq8_graph_serving"] == 1.0
    assert "graph_build_s" not in out and "slowest_search_during_build_s" not in out
    assert out["hnsw_recall_at_10"] > 0.9 and out["exact_p50_ms"] > 0
    assert (tmp_path / "dense-sq8.faiss").is_file()  # the dense-reopen stages' input
    order = [(stage, overrides) for stage, overrides in stages_for(True)]
    assert [s for s, _ in order][:3] == [Stage.TANDEM, Stage.REOPEN, Stage.RAW]
    assert order[2][1] == {"graph_from_tandem": True}
    assert stages_for(False)[0] == (Stage.RAW, {"graph_from_tandem": False})


def test_ingest_timing_counts_the_calls_not_the_generation_of_their_input() -> None:
    """The Tandem stage times ``Corpus.add`` alone, as the raw arm times its index call
    alone: a slow generator between the calls is off the clock."""
    from bench.scale.tandem_stage import timed_calls

    clock = [0.0]

    def slow_items() -> Iterator[int]:
        for item in range(3):
            clock[0] += 10.0  # generating each batch: 10 s
            yield item

    seen: list[int] = []

    def add(item: int) -> None:
        clock[0] += 1.0  # each call: 1 s
        seen.append(item)

    spent = timed_calls(add, slow_items(), clock=lambda: clock[0])
    assert seen == [0, 1, 2]
    assert spent == pytest.approx(3.0)


def test_render_labels_graph_figures_exact_below_the_hnsw_threshold() -> None:
    """Below 50,000 vectors the index builds no graph: the "HNSW" and "SQ8" figures are
    the exact path's, and efSearch was not used."""
    figures = {"hnsw_ef_search": 128.0, "hnsw_recall_at_10": 1.0, "sq8_p50_ms": 0.5}
    small = {"n_docs": 1_000.0, **figures}  # an older row: no flag, judged by its size
    flagged = {"n_docs": 1_000.0, **figures, "hnsw_graph_serving": 0.0, "sq8_graph_serving": 0.0}
    big = {"n_docs": 100_000.0, **figures, "hnsw_graph_serving": 1.0, "sq8_graph_serving": 1.0}
    header = {"revision": "r", "timestamp": "t"}
    for row in (small, flagged):
        text = render_scale([row], header)
        assert "| 1,000 | exact | 1.000 (exact) |" in text
        assert "0.50 (exact)" in text and "Cells marked (exact)" in text
    text = render_scale([big], header)
    assert "| 100,000 | 128 | 1.000 |" in text and "(exact)" not in text


def test_the_report_threshold_is_the_vector_index_default() -> None:
    import inspect

    from bench.scale.run import HNSW_THRESHOLD
    from dense import FaissIndex

    default = inspect.signature(FaissIndex).parameters["hnsw_threshold"].default
    assert default == HNSW_THRESHOLD
