"""Pages of a search: every documented offset reaches documents, integer-like numbers
count as the numbers they are, and a page never comes back short while more matches wait.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from engine import Corpus, CorpusConfig, Document, SearchEngine
from engine.limits import MAX_LANGUAGE_ID, MAX_OFFSET, MAX_TOP_K
from engine.storage import DocumentStore
from sparse import MAX_SOURCES, StoredBody

MATCHING = 1_250


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpus]:
    """A keyword corpus where every document matches "apple", with distinct scores."""
    directory: Path = tmp_path_factory.mktemp("paging")
    with SearchEngine(directory) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="many", embedder=None))
        corpus.add(
            Document(id=f"d{i:04d}", title=f"t{i}", text="apple " + "filler " * (i % 50))
            for i in range(MATCHING)
        )
        yield corpus


def test_the_deepest_documented_page_fits_the_keyword_facade() -> None:
    assert MAX_OFFSET + MAX_TOP_K <= MAX_SOURCES


@pytest.mark.parametrize("offset", [0, 495, 500, 600, 990, MAX_OFFSET])
def test_every_documented_offset_returns_a_full_page(many: Corpus, offset: int) -> None:
    assert len(many.search("apple", top_k=10, offset=offset)) == 10


def test_deep_pages_continue_the_ranking_without_gaps(many: Corpus) -> None:
    whole = [hit.source_id for hit in many.search("apple", top_k=MAX_TOP_K, offset=400)]
    pages = [
        hit.source_id
        for offset in range(400, 400 + MAX_TOP_K, 50)
        for hit in many.search("apple", top_k=50, offset=offset)
    ]
    assert pages == whole
    assert len(set(whole)) == MAX_TOP_K


def test_numpy_integers_are_taken_as_their_values(many: Corpus) -> None:
    plain = [hit.source_id for hit in many.search("apple", top_k=25, offset=20)]
    numpy = [hit.source_id for hit in many.search("apple", top_k=np.int64(25), offset=np.int32(20))]
    assert numpy == plain
    assert len(numpy) == 25


def test_browsing_an_impossible_language_is_empty(many: Corpus) -> None:
    with many._shard_reads() as searcher:
        assert searcher.browse(10, 0, MAX_LANGUAGE_ID + 1, ()) == []
        assert searcher.browse(10, 0, 10**30, ()) == []
        assert len(searcher.browse(10, 0, 0, ())) == 10


@pytest.mark.parametrize("vectors", [False, True], ids=["keyword", "hybrid"])
def test_documents_sharing_a_url_are_each_answered_whatever_the_strategy(
    fast_engine: SearchEngine, vectors: bool
) -> None:
    """Sections of one page share its URL: each is a passage of its own, in keyword and
    hybrid corpora alike, and paging reaches every one of them."""
    config = CorpusConfig(name="pages") if vectors else CorpusConfig(name="pages", embedder=None)
    corpus = fast_engine.create_corpus(config)
    corpus.add(
        [
            Document(id=f"s{i}", text="password " * 5 + f"section {i}", url="/help/one-page")
            for i in range(4)
        ]
        + [
            Document(id=f"w{i}", text=f"password and other words {i} " * 3, url=f"/p/{i}")
            for i in range(6)
        ]
    )
    pages = [
        hit.source_id
        for offset in (0, 4, 8)
        for hit in corpus.search("password", top_k=4, offset=offset)
    ]
    assert sorted(pages) == sorted([f"s{i}" for i in range(4)] + [f"w{i}" for i in range(6)])
    first = corpus.search("password", top_k=10)
    assert all(hit.ranks.sparse is not None for hit in first)


def test_hybrid_pages_past_the_fusion_window_neither_repeat_nor_skip(
    fast_engine: SearchEngine,
) -> None:
    """Regression: a hybrid search fused a window that grew with ``offset + top_k``, so
    every page past the window came from another ranking — paging 1,000 matches 50 at a
    time repeated 42 documents and never showed 42 others."""
    corpus = fast_engine.create_corpus(CorpusConfig(name="hybrid"))
    corpus.add(
        Document(id=f"d{i:03d}", text=f"apple word{i % 7} " + "filler " * (i % 13))
        for i in range(350)
    )
    window = corpus.config.window
    pages = [
        hit.source_id
        for offset in range(0, 350, 50)
        for hit in corpus.search("apple word3", top_k=50, offset=offset)
    ]
    assert len(pages) == len(set(pages)) == 350  # every match once
    first = [hit.source_id for hit in corpus.search("apple word3", top_k=window)]
    assert pages[:window] == first  # the window's own ranking leads
    deep = corpus.search("apple word3", top_k=MAX_TOP_K, offset=window)
    assert [hit.source_id for hit in deep] == pages[window : window + MAX_TOP_K]
    # and ranks say where each arm put the document, in the ranking it was cut from
    assert all(hit.ranks.sparse is not None or hit.ranks.dense is not None for hit in deep)


def test_a_deep_page_reads_the_texts_of_its_own_passages_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a keyword page at offset 1,000 read the whole text of every hit above
    it to cut excerpts it then threw away (1,250 texts of 1 MB: +1.2 GB for one request).
    The page's excerpts are cut from its own texts, the same as a first page cuts them."""
    asked: list[int] = []
    read = DocumentStore.public_bodies

    def recording(store: DocumentStore, ids: Sequence[str]) -> dict[str, StoredBody]:
        asked.append(len(ids))
        return read(store, ids)

    monkeypatch.setattr(DocumentStore, "public_bodies", recording)
    with SearchEngine(tmp_path / "deep") as engine:
        corpus = engine.create_corpus(CorpusConfig(name="deep", embedder=None))
        corpus.add(
            Document(id=f"d{i:03d}", text="apple " + "filler " * (i % 50) + f"tail{i}")
            for i in range(200)
        )
        first = {p.source_id: p.excerpt for p in corpus.search("apple", top_k=200)}
        asked.clear()
        page = corpus.search("apple", top_k=10, offset=150)
    assert len(page) == 10
    assert asked and max(asked) <= 10
    assert {p.source_id: p.excerpt for p in page} == {p.source_id: first[p.source_id] for p in page}


# -- past the deepest page ------------------------------------------------------------------


@pytest.mark.parametrize("offset", [MAX_OFFSET + 1, 5_000, 10**30, float("inf")])
def test_a_page_past_the_deepest_offset_is_empty(many: Corpus, offset: float) -> None:
    """Regression: an offset past ``MAX_OFFSET`` was clamped to it, so with 1,250 matches
    the page at 1,200 repeated the page at 1,000."""
    assert many.search("apple", top_k=MAX_TOP_K, offset=offset) == []
    with many._shard_reads() as searcher:
        assert searcher.browse(10, offset, None, ()) == []


def test_the_page_at_the_deepest_offset_is_the_last_one(many: Corpus) -> None:
    whole = [hit.source_id for hit in many.search("apple", top_k=MAX_TOP_K, offset=800)]
    last = [hit.source_id for hit in many.search("apple", top_k=MAX_TOP_K, offset=MAX_OFFSET)]
    assert len(last) == MAX_TOP_K and not set(last) & set(whole)  # 1,000..1,199
    # negative, NaN and non-numbers still start at 0; a float is cut to its integer part
    first = many.search("apple", top_k=5)
    for offset in (-3, float("-inf"), float("nan"), "1200", None, True):
        assert many.search("apple", top_k=5, offset=offset) == first, offset
    assert many.search("apple", top_k=5, offset=1000.9) == many.search(
        "apple", top_k=5, offset=MAX_OFFSET
    )


def test_paging_until_an_empty_page_stops_without_repeating(many: Corpus) -> None:
    seen: list[str] = []
    offset = 0
    for _ in range(MATCHING):  # a bound, so a page that repeats forever fails, not hangs
        page = many.search("apple", top_k=MAX_TOP_K, offset=offset)
        if not page:
            break
        seen += [hit.source_id for hit in page]
        offset += len(page)
    else:
        pytest.fail("paging never reached an empty page")
    assert len(seen) == len(set(seen)) == MAX_OFFSET + MAX_TOP_K
    assert offset == MAX_OFFSET + MAX_TOP_K
