"""``engine.search.completion``: each arm also ranks the other arm's extra candidates.

Pure function first (fake scorers, hypothesis), then the engine: with a small window the
answers are exactly the fusion of each arm's full ranking cut to the union of the two
windows, and ``complete_windows=False`` fuses the bare windows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Corpus, CorpusConfig, Document, SearchEngine
from engine.search.completion import complete_windows
from fusion import FusedHit, rrf, zscore_fusion
from sparse import KeywordHit
from tests.support.fakes import HashEmbedder, SwitchableEmbedder
from tests.support.topics import topic_documents


def kw(doc_id: str, score: float) -> KeywordHit:
    return KeywordHit(source_id=doc_id, title="", url="", excerpt="", score=score)


class Scorers:
    """Fake arms: a full score table per arm; records which ids each was asked for."""

    def __init__(self, keyword: dict[str, float], vector: dict[str, float]) -> None:
        self.keyword = keyword
        self.vector = vector
        self.asked: dict[str, list[list[str]]] = {"keyword": [], "vector": []}

    def keyword_scores(self, ids: list[str]) -> list[KeywordHit]:
        self.asked["keyword"].append(list(ids))
        found = [(i, self.keyword[i]) for i in ids if i in self.keyword]
        return [kw(i, s) for i, s in sorted(found, key=lambda p: (-p[1], p[0]))]

    def vector_scores(self, ids: list[str]) -> list[tuple[str, float]]:
        self.asked["vector"].append(list(ids))
        found = [(i, self.vector[i]) for i in ids if i in self.vector]
        return sorted(found, key=lambda p: (-p[1], p[0]))

    def windows(self, window: int) -> tuple[list[KeywordHit], list[tuple[str, float]]]:
        sparse = sorted(self.keyword.items(), key=lambda p: (-p[1], p[0]))[:window]
        dense = sorted(self.vector.items(), key=lambda p: (-p[1], p[0]))[:window]
        return [kw(i, s) for i, s in sparse], dense

    def complete(self, window: int) -> tuple[list[KeywordHit], list[tuple[str, float]]]:
        sparse, dense = self.windows(window)
        return complete_windows(
            sparse,
            dense,
            window,
            keyword_scores=self.keyword_scores,
            vector_scores=self.vector_scores,
        )


def test_each_window_is_followed_by_its_order_of_the_other_arms_extras() -> None:
    arms = Scorers(
        keyword={"a": 9, "b": 8, "c": 7, "d": 1},  # "e" matches no query term
        vector={"x": 0.9, "d": 0.8, "e": 0.7, "b": 0.2, "a": 0.1, "c": 0.05},
    )
    sparse, dense = arms.complete(window=2)
    # keyword window a, b; then the vector window's extras it can score: d (e: no match)
    assert [(h.source_id, h.score) for h in sparse] == [("a", 9), ("b", 8), ("d", 1)]
    assert arms.asked["keyword"] == [["x", "d"]]
    assert dense == [("x", 0.9), ("d", 0.8), ("b", 0.2), ("a", 0.1)]
    assert arms.asked["vector"] == [["a", "b"]]


def test_an_extra_the_keyword_arm_matches_is_ranked_after_its_window() -> None:
    arms = Scorers(keyword={"a": 9, "b": 8, "x": 3}, vector={"x": 0.9, "y": 0.8, "a": 0.5})
    sparse, dense = arms.complete(window=2)
    assert [h.source_id for h in sparse] == ["a", "b", "x"]
    assert [d for d, _ in dense] == ["x", "y", "a"]  # b has no vector


def test_a_short_window_already_holds_everything_its_arm_ranks() -> None:
    arms = Scorers(keyword={"a": 2}, vector={"x": 0.9, "y": 0.8, "a": 0.1})
    sparse, dense = arms.complete(window=2)
    assert arms.asked["keyword"] == []  # the keyword window came back short
    assert [h.source_id for h in sparse] == ["a"]
    assert arms.asked["vector"] == [["a"]]
    assert dense == [("x", 0.9), ("y", 0.8), ("a", 0.1)]


def test_answers_outside_the_asked_ids_are_ignored() -> None:
    sparse = [kw("a", 2.0), kw("b", 1.0)]
    dense = [("x", 0.9), ("a", 0.8)]
    out_sparse, out_dense = complete_windows(
        sparse,
        dense,
        2,
        keyword_scores=lambda ids: [kw("zzz", 5.0), kw("a", 2.0), kw("x", 0.5)],
        vector_scores=lambda ids: [("b", 0.3), ("rogue", 0.99), ("x", 0.9)],
    )
    assert [h.source_id for h in out_sparse] == ["a", "b", "x"]
    assert out_dense == [("x", 0.9), ("a", 0.8), ("b", 0.3)]


ids = st.sampled_from([f"d{i}" for i in range(12)])
tables = st.dictionaries(ids, st.floats(0.01, 10, allow_nan=False), max_size=12)


@settings(max_examples=200, deadline=None)
@given(tables, tables, st.integers(1, 8))
def test_completion_keeps_windows_and_cuts_full_rankings_to_the_union(
    keyword: dict[str, float], vector: dict[str, float], window: int
) -> None:
    arms = Scorers(keyword, vector)
    sparse, dense = arms.windows(window)
    out_sparse, out_dense = arms.complete(window)
    union = {h.source_id for h in sparse} | {d for d, _ in dense}
    # the windows are untouched prefixes
    assert out_sparse[: len(sparse)] == sparse
    assert out_dense[: len(dense)] == dense
    # and the whole is each arm's full ranking restricted to the union
    full_kw = [h.source_id for h in arms.keyword_scores(sorted(keyword))]
    full_vec = [d for d, _ in arms.vector_scores(sorted(vector))]
    assert [h.source_id for h in out_sparse] == [d for d in full_kw if d in union]
    assert [d for d, _ in out_dense] == [d for d in full_vec if d in union]


# -- the engine ----------------------------------------------------------------------------

DOCS = topic_documents()
QUERIES = ["printer fuser", "toner paper jam", "network driver password", "invoice note"]
WINDOW = 4


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SearchEngine]:
    embedder = SwitchableEmbedder(HashEmbedder())
    with SearchEngine(tmp_path / "engine", embedder_factory=lambda spec: embedder) as eng:
        yield eng


def make(engine: SearchEngine, name: str, **config: object) -> Corpus:
    spec = {"name": name, "embedder": "hash", **config}
    corpus = engine.create_corpus(CorpusConfig.model_validate(spec))
    corpus.add(DOCS)
    return corpus


def full_rankings(corpus: Corpus, text: str) -> tuple[list[tuple[str, float]], ...]:
    """Each arm's ranking of the whole corpus (a window larger than the corpus)."""
    vector = corpus._searcher.state.embedder.embed([text])[0]  # type: ignore[union-attr]
    with corpus._shard_reads() as reads:
        keyword = reads.keyword_window(text, 100, None, (), True, 0).hits()
        vectors = reads.vector_window(text, vector, 100, None, (), 0, ()).hits()
    return [(h.id, h.score or 0.0) for h in keyword], [(h.id, h.score or 0.0) for h in vectors]


def cut(ranking: Sequence[tuple[str, float]], union: set[str]) -> list[tuple[str, float]]:
    return [(doc_id, s) for doc_id, s in ranking if doc_id in union]


@pytest.mark.parametrize("fusion", ["rrf", "zscore"])
def test_answers_fuse_each_arms_ranking_of_the_union_of_both_windows(
    engine: SearchEngine, fusion: str
) -> None:
    corpus = make(engine, "c", window=WINDOW, fusion=fusion)
    extended = 0
    for text in QUERIES:
        keyword, vector = full_rankings(corpus, text)
        union = {d for d, _ in keyword[:WINDOW]} | {d for d, _ in vector[:WINDOW]}
        sparse, dense = cut(keyword, union), cut(vector, union)
        extended += len(sparse) > WINDOW or len(dense) > WINDOW
        want: list[FusedHit]
        if fusion == "rrf":
            want = rrf([[d for d, _ in sparse], [d for d, _ in dense]], k=60, limit=WINDOW)
        else:
            want = zscore_fusion([sparse, dense], weights=(0.55, 0.45), limit=WINDOW)
        hits = corpus.search(text, top_k=WINDOW)
        assert [h.source_id for h in hits] == [f.id for f in want]
        for hit, fused in zip(hits, want, strict=True):
            assert hit.score == pytest.approx(fused.score)
            assert (hit.ranks.sparse, hit.ranks.dense) == fused.ranks
    assert extended  # the queries exercise completion, not just full windows


def test_off_fuses_the_bare_windows(engine: SearchEngine) -> None:
    corpus = make(engine, "bare", window=WINDOW, complete_windows=False)
    for text in QUERIES:
        keyword, vector = full_rankings(corpus, text)
        want = rrf(
            [[d for d, _ in keyword[:WINDOW]], [d for d, _ in vector[:WINDOW]]], k=60, limit=WINDOW
        )
        hits = corpus.search(text, top_k=WINDOW)
        assert [(h.source_id, h.ranks.sparse, h.ranks.dense) for h in hits] == [
            (f.id, *f.ranks) for f in want
        ]
        assert all((h.ranks.sparse or 0) <= WINDOW and (h.ranks.dense or 0) <= WINDOW for h in hits)


def test_a_completed_rank_lies_past_the_window(engine: SearchEngine) -> None:
    corpus = make(engine, "ranks", window=WINDOW)
    ranks = [
        (h.ranks.sparse, h.ranks.dense) for t in QUERIES for h in corpus.search(t, top_k=WINDOW)
    ]
    assert any((s or 0) > WINDOW or (d or 0) > WINDOW for s, d in ranks)
    assert max(max(s or 0, d or 0) for s, d in ranks) <= 2 * WINDOW


def test_the_choice_persists(tmp_path: Path) -> None:
    factory = lambda spec: HashEmbedder()  # noqa: E731
    with SearchEngine(tmp_path / "e", embedder_factory=factory) as eng:
        eng.create_corpus(
            CorpusConfig.model_validate(
                {"name": "off", "embedder": "hash", "complete_windows": False}
            )
        )
        eng.create_corpus(CorpusConfig.model_validate({"name": "on", "embedder": "hash"}))
    with SearchEngine(tmp_path / "e", embedder_factory=factory) as eng:
        assert eng.corpus("off").config.complete_windows is False
        assert eng.corpus("on").config.complete_windows is True


def test_completion_never_brings_in_a_private_document(engine: SearchEngine) -> None:
    corpus = make(engine, "private", window=WINDOW)
    hidden = [
        Document(
            id=f"secret-{t}",
            title=f"{t} {t} guide",
            text=f"{t} " * 6,
            access_groups=frozenset({"staff"}),
        )
        for t in ("printer", "toner", "network", "invoice")
    ]
    corpus.add(hidden)
    for text in QUERIES:
        hits = corpus.search(text, top_k=WINDOW)
        assert hits and not any(h.source_id.startswith("secret-") for h in hits)
        # the arms' extended rankings themselves never hold one either
        with corpus._shard_reads() as reads:
            keyword = reads.keyword_window(text, 100, None, (), True, 0).ids
        assert not any(i.startswith("secret-") for i in keyword)
