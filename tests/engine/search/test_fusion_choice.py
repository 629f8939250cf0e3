"""``CorpusConfig(fusion=...)``: the corpus's answers are exactly the chosen fusion of its
two scored arm windows, every answer carries each arm's rank, and the choice persists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from engine import Corpus, CorpusConfig, SearchEngine
from engine.config import RRFFusion, ZScoreFusion
from fusion import FusedHit, rrf, zscore_fusion
from tests.support.fakes import HashEmbedder, SwitchableEmbedder
from tests.support.topics import topic_documents

DOCS = topic_documents()
QUERIES = ["printer fuser", "toner paper jam", "network driver password", "invoice"]


@pytest.fixture
def embedder() -> SwitchableEmbedder:
    return SwitchableEmbedder(HashEmbedder())


@pytest.fixture
def engine(tmp_path: Path, embedder: SwitchableEmbedder) -> Iterator[SearchEngine]:
    with SearchEngine(tmp_path / "engine", embedder_factory=lambda spec: embedder) as eng:
        yield eng


def make(engine: SearchEngine, name: str, fusion: object) -> Corpus:
    config = CorpusConfig.model_validate({"name": name, "embedder": "hash", "fusion": fusion})
    corpus = engine.create_corpus(config)
    corpus.add(DOCS)
    return corpus


def expected(corpus: Corpus, embedder: SwitchableEmbedder, text: str) -> list[FusedHit]:
    """The corpus's own scored windows, fused by the pure function its config names."""
    vector = embedder.embed([text])[0]
    window = corpus.config.window
    with corpus._shard_reads() as reads:
        keyword = reads.keyword_window(text, window, None, (), True, 10)
        vectors = reads.vector_window(text, vector, window, None, (), 10, ())
    sparse = [(h.id, h.score or 0.0) for h in keyword.hits()]
    dense = [(h.id, h.score or 0.0) for h in vectors.hits()]
    spec = corpus.config.fusion
    if isinstance(spec, ZScoreFusion):
        weights = (1 - spec.dense_weight, spec.dense_weight)
        return zscore_fusion([sparse, dense], weights=weights, limit=10)
    return rrf([[i for i, _ in sparse], [i for i, _ in dense]], k=corpus.config.rrf_k, limit=10)


@pytest.mark.parametrize("fusion", ["rrf", "zscore", ZScoreFusion(dense_weight=0.8)])
def test_answers_are_the_configured_fusion_of_the_arm_windows(
    engine: SearchEngine, embedder: SwitchableEmbedder, fusion: object
) -> None:
    corpus = make(engine, "c", fusion)
    for text in QUERIES:
        hits = corpus.search(text, top_k=10)
        want = expected(corpus, embedder, text)
        assert [h.source_id for h in hits] == [f.id for f in want]
        for hit, fused in zip(hits, want, strict=True):
            assert hit.score == pytest.approx(fused.score)
            assert (hit.ranks.sparse, hit.ranks.dense) == fused.ranks
        assert any(h.ranks.sparse and h.ranks.dense for h in hits)


def test_the_two_fusions_can_order_differently(
    engine: SearchEngine, embedder: SwitchableEmbedder
) -> None:
    by_rank = make(engine, "by-rank", "rrf")
    by_score = make(engine, "by-score", ZScoreFusion(dense_weight=0.5))
    orders = {
        text: (
            [h.source_id for h in by_rank.search(text)],
            [h.source_id for h in by_score.search(text)],
        )
        for text in QUERIES
    }
    assert any(a != b for a, b in orders.values())  # the choice is not a no-op


def test_zscore_keyword_fallback_keeps_the_keyword_order(
    engine: SearchEngine, embedder: SwitchableEmbedder
) -> None:
    corpus = make(engine, "z", "zscore")
    keyword = engine.create_corpus(CorpusConfig(name="kw", embedder=None))
    keyword.add(DOCS)
    embedder.down = True
    for text in QUERIES:
        hits = corpus.search(text)
        assert [h.source_id for h in hits] == [h.source_id for h in keyword.search(text)]
        assert all(h.ranks.dense is None and h.ranks.sparse for h in hits)


def test_zscore_keyword_scores_do_not_depend_on_the_page_asked_for(
    engine: SearchEngine,
) -> None:
    """Regression: a keyword z-score answer standardised over the hits of the page asked
    for: a one-hit page scored 0, the same document scored otherwise at top 3, and the
    second page's scores rose above the first page's."""
    corpus = engine.create_corpus(
        CorpusConfig.model_validate({"name": "zk", "embedder": None, "fusion": "zscore"})
    )
    corpus.add(DOCS)
    text = "printer toner paper"
    whole = {h.source_id: h.score for h in corpus.search(text, top_k=20)}
    assert len(whole) >= 8 and len(set(whole.values())) > 1
    for top_k, offset in ((1, 0), (3, 0), (4, 4)):
        page = corpus.search(text, top_k=top_k, offset=offset)
        assert all(h.score == whole[h.source_id] for h in page), (top_k, offset)
    first, second = corpus.search(text, top_k=4), corpus.search(text, top_k=4, offset=4)
    assert first[-1].score >= second[0].score


def test_arm_weights_too_small_to_count_are_refused() -> None:
    """A weight whose share w / (k + rank) underflows to 0 acted as 0, silently."""
    with pytest.raises(ValidationError, match="0 or at least"):
        CorpusConfig.model_validate({"name": "x", "weights": {"sparse": 5e-324}})
    assert CorpusConfig.model_validate({"name": "x", "weights": {"sparse": 0}}).weights.sparse == 0


def test_the_choice_persists_and_rejects_unknown_names(tmp_path: Path) -> None:
    factory = lambda spec: HashEmbedder()  # noqa: E731
    with SearchEngine(tmp_path / "e", embedder_factory=factory) as eng:
        eng.create_corpus(
            CorpusConfig.model_validate({"name": "z", "embedder": "hash", "fusion": "zscore"})
        )
        eng.create_corpus(CorpusConfig.model_validate({"name": "r", "embedder": "hash"}))
    with SearchEngine(tmp_path / "e", embedder_factory=factory) as eng:
        assert eng.corpus("z").config.fusion == ZScoreFusion()
        assert eng.corpus("r").config.fusion == RRFFusion()
    with pytest.raises(ValidationError, match="unknown fusion"):
        CorpusConfig.model_validate({"name": "x", "fusion": "borda"})
    with pytest.raises(ValidationError):
        CorpusConfig(name="x", fusion=ZScoreFusion(dense_weight=1.5))


@pytest.mark.parametrize("sparse_weight", [2.0, 0.5, 0.0])
def test_a_keyword_only_answer_keeps_the_keyword_weight_and_order(
    engine: SearchEngine, embedder: SwitchableEmbedder, sparse_weight: float
) -> None:
    """Regression: with the embedder down an RRF answer scored 1/(k + rank) whatever the
    keyword arm's weight (its hybrid answers: weight/(k + rank)); a weight of 0 still
    answers in the keyword order (the arm is all there is), at weight 1."""
    config = CorpusConfig.model_validate(
        {"name": "w", "embedder": "hash", "weights": {"sparse": sparse_weight, "dense": 1}}
    )
    corpus = engine.create_corpus(config)
    corpus.add(DOCS)
    keyword = engine.create_corpus(CorpusConfig(name="kw", embedder=None))
    keyword.add(DOCS)
    embedder.down = True
    scale = sparse_weight or 1.0
    for text in QUERIES:
        hits = corpus.search(text, top_k=10)
        assert [h.source_id for h in hits] == [h.source_id for h in keyword.search(text)]
        for hit in hits:
            assert hit.ranks.sparse is not None
            assert hit.score == pytest.approx(scale / (config.rrf_k + hit.ranks.sparse))
