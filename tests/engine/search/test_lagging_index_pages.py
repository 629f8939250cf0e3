"""A keyword index that lags the store still gives full pages, ranked without the stale.

The state a writer leaves when it dies between its store commit and its keyword commit
(and the one every search sees for a moment while a write lands): the index still holds
documents the store has deleted. They are never shown (every passage is checked against
the store); the page is ranked again without them, so it is as full as the corpus allows
and the arms' ranks have no gaps where they were.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from engine import Corpus, CorpusConfig, Document, SearchEngine, SourceNotFound
from engine.storage import StoredDocument
from engine.write.keyword_keeper import KeywordIndexKeeper
from tests.support.fakes import SwitchableEmbedder

# d0 mentions alpha most, d19 least: the keyword arm ranks them d0, d1, ... d19.
DOCS = [
    Document(id=f"d{i}", title=f"doc {i}", text="alpha " * (20 - i) + "rest") for i in range(20)
]
DELETED = [f"d{i}" for i in range(5)]
REMAINING = [f"d{i}" for i in range(5, 20)]


@pytest.fixture
def engine(tmp_path: Path, hash_embedder: SwitchableEmbedder) -> Iterator[SearchEngine]:
    with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as eng:
        yield eng


def _delete_from_the_store_only(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch, ids: Sequence[str] = DELETED
) -> None:
    """Delete as a writer killed right after its store commit would have: the keyword
    index never hears of it (no flag either: nothing failed that the process could see)."""
    applied = KeywordIndexKeeper.apply

    def dies_before_deleting(
        self: KeywordIndexKeeper,
        written: Sequence[StoredDocument],
        deleted: Sequence[str],
        seq: int,
    ) -> None:
        if not deleted:
            applied(self, written, deleted, seq)

    monkeypatch.setattr(KeywordIndexKeeper, "apply", dies_before_deleting)
    assert corpus.delete(ids) == len(ids)
    monkeypatch.setattr(KeywordIndexKeeper, "apply", applied)


@pytest.fixture
def lagging(engine: SearchEngine, monkeypatch: pytest.MonkeyPatch) -> Corpus:
    """A keyword-only corpus whose index still holds ``DELETED``."""
    corpus = engine.create_corpus(CorpusConfig(name="c", embedder=None))
    corpus.add(DOCS)
    _delete_from_the_store_only(corpus, monkeypatch)
    return corpus


def test_a_keyword_page_is_full_though_the_index_still_holds_deleted_documents(
    lagging: Corpus,
) -> None:
    corpus = lagging
    with pytest.raises(SourceNotFound):
        corpus.fetch_source("d0")
    hits = corpus.search("alpha", top_k=10)
    assert [h.source_id for h in hits] == REMAINING[:10]  # was d5..d9 alone
    assert [h.ranks.sparse for h in hits] == list(range(1, 11))  # was 6..10


def test_a_hybrid_page_is_ranked_without_the_stale_keyword_hits(
    engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = engine.create_corpus(CorpusConfig(name="c"))
    corpus.add(DOCS)
    _delete_from_the_store_only(corpus, monkeypatch)
    hits = corpus.search("alpha", top_k=20)
    assert sorted(h.source_id for h in hits) == sorted(REMAINING)
    assert sorted(h.ranks.sparse or 0 for h in hits) == list(range(1, 16))  # was 6..20
    assert sorted(h.ranks.dense or 0 for h in hits) == list(range(1, 16))


def test_another_process_pages_through_the_same_ranking(
    tmp_path: Path, engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that stayed open while the writer died: its index lags the store (it
    knows), so a page below the first is ranked again even when none of its own hits
    is stale — stale hits above it would shift it."""
    corpus = engine.create_corpus(CorpusConfig(name="c", embedder=None))
    corpus.add(DOCS)
    with SearchEngine(tmp_path) as other:
        stayed_open = other.corpus("c")
        assert len(stayed_open.search("alpha", top_k=20)) == 20
        _delete_from_the_store_only(corpus, monkeypatch)
        pages = [
            [h.source_id for h in stayed_open.search("alpha", top_k=5, offset=skip)]
            for skip in (0, 5, 10, 15)
        ]
        # (was d5..d9 twice, then d10..d14, d15..d19)
        assert pages == [REMAINING[0:5], REMAINING[5:10], REMAINING[10:15], []]


def test_nothing_to_refill_past_the_last_match(lagging: Corpus) -> None:
    hits = lagging.search("alpha", top_k=50)
    assert [h.source_id for h in hits] == REMAINING
    assert [h.ranks.sparse for h in hits] == list(range(1, 16))


@pytest.mark.parametrize("fusion", ["rrf", "zscore"])
def test_pages_of_a_lagging_index_neither_repeat_nor_skip(
    tmp_path: Path, hash_embedder: SwitchableEmbedder, fusion: str
) -> None:
    """Review: with stale hits excluded only where each page looked, every offset was
    ranked from a different candidate set — z-score corpora repeated and skipped
    documents on 34 of 40 queries. Every candidate of both arms is confirmed now."""
    rng = random.Random(5)
    vocabulary = [f"w{i}" for i in range(30)]
    docs = [
        Document(id=f"d{i}", text=" ".join(rng.choices(vocabulary, k=rng.randint(3, 12))))
        for i in range(150)
    ]
    config = CorpusConfig(name="c") if fusion == "rrf" else CorpusConfig(name="c", fusion="zscore")
    with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as writer:
        corpus = writer.create_corpus(config)
        corpus.add(docs)
        with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as other:
            stayed_open = other.corpus("c")
            stayed_open.search("w1")
            stale = [f"d{i}" for i in range(0, 150, 9)]
            with pytest.MonkeyPatch.context() as patch:
                _delete_from_the_store_only(corpus, patch, stale)
            for _ in range(20):
                query = " ".join(rng.sample(vocabulary, 3))
                whole = [h.source_id for h in stayed_open.search(query, top_k=60)]
                paged = [
                    h.source_id
                    for skip in range(0, 60, 10)
                    for h in stayed_open.search(query, top_k=10, offset=skip)
                ]
                assert paged == whole, query
                assert not set(whole) & set(stale)
