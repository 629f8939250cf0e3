"""Collection statistics across indexes: one part of a split collection, searched with
the statistics summed over every part, scores each document as the whole would."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparse import KeywordSearchFacade, TermStatistics
from sparse.contracts import AccessContext, RetrievalQuery, SparseDocument
from sparse.tantivy_backend import TantivyBackend
from sparse.tantivy_index import TantivyIndex

PUBLIC = AccessContext.public_only()
# Words the English analyzer keeps as they are (no stop word, no stemming change).
WORDS = ("amber", "basil", "cedar", "delta", "ember", "fjord", "grove", "heron")
LENGTH = 6  # every body has this many words: the length normalisation is the same everywhere


def _docs(bodies: Sequence[Sequence[str]], prefix: str = "d") -> list[SparseDocument]:
    return [SparseDocument(f"{prefix}{i:03d}", "", " ".join(b)) for i, b in enumerate(bodies)]


def _backend(path: Path, docs: Sequence[SparseDocument]) -> TantivyBackend:
    index = TantivyIndex(path)
    if docs:
        index.upsert(docs)
    return TantivyBackend(index)


def _scores(backend: TantivyBackend, text: str, statistics: TermStatistics | None = None) -> dict:
    found = backend.search(RetrievalQuery(text, 500, statistics=statistics), PUBLIC)
    return {hit.source_id: hit.score for hit in found}


def test_combine_sums_documents_and_each_terms_frequency() -> None:
    a = TermStatistics(10, ((("f", "x"), 2), (("f", "y"), 1)))
    b = TermStatistics(5, ((("f", "y"), 4), (("g", "x"), 3)))
    combined = TermStatistics.combine([a, b])
    assert combined.documents == 15
    assert dict(combined.doc_freqs) == {("f", "x"): 2, ("f", "y"): 5, ("g", "x"): 3}
    assert TermStatistics.combine([]) == TermStatistics(0)


def test_documents_count_as_bm25_counts_them_deleted_ones_included(tmp_path: Path) -> None:
    """tantivy's idf reads the documents of its segments, deleted ones not yet merged away
    included (the binding exposes only the live count): the view's ``documents`` must be
    that number, or a shard's idf ratio would be off after every update."""
    backend = _backend(tmp_path / "i", _docs([["amber"] * LENGTH] * 3 + [["basil"] * LENGTH] * 7))
    backend.index.delete([f"d{i:03d}" for i in range(3, 10)])
    view = backend.index.view()
    assert int(view.searcher.num_docs) == 3
    assert view.documents == 10
    stats = backend.term_statistics("amber", None)
    assert stats.documents == 10 and [n for _, n in stats.doc_freqs] == [3]
    # BM25 of a one-term query on equal-length documents (tf = 6, length = average):
    # idf(N = 10, df = 3) * tf * (k1 + 1) / (tf + k1), k1 = 1.2.
    (score,) = set(_scores(backend, "amber").values())
    idf = math.log(1 + (10 - 3 + 0.5) / (3 + 0.5))
    assert score == pytest.approx(idf * LENGTH * 2.2 / (LENGTH + 1.2), rel=1e-6)


def test_a_shard_scored_with_global_statistics_ranks_as_the_whole(tmp_path: Path) -> None:
    """Local statistics invert two documents; summed statistics restore the order of one
    index holding both parts."""
    # "amber" is rare overall (2 of 12) but common on part A's side; "basil" the reverse.
    part_a = [["amber", *["fjord"] * 5], ["amber", *["grove"] * 5]] + [["basil"] * LENGTH] * 4
    part_b = [["basil", *["heron"] * 5]] + [["cedar"] * LENGTH] * 5
    docs_a, docs_b = _docs(part_a, "a"), _docs(part_b, "b")
    a, b = _backend(tmp_path / "a", docs_a), _backend(tmp_path / "b", docs_b)
    whole = _backend(tmp_path / "whole", docs_a + docs_b)
    query = "amber basil"
    local = {**_scores(a, query), **_scores(b, query)}
    assert local["b000"] > local["a000"]  # per-part idf: basil looks rare on part B
    combined = TermStatistics.combine(
        [a.term_statistics(query, None), b.term_statistics(query, None)]
    )
    merged = {**_scores(a, query, combined), **_scores(b, query, combined)}
    expected = _scores(whole, query)
    assert merged.keys() == expected.keys()
    for source_id, score in expected.items():
        assert merged[source_id] == pytest.approx(score, rel=1e-5)
    assert merged["a000"] > merged["b000"]
    # and a part's own statistics change nothing
    own = a.term_statistics(query, None)
    assert _scores(a, query, own) == _scores(a, query)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    bodies=st.lists(
        st.lists(st.sampled_from(WORDS), min_size=LENGTH, max_size=LENGTH), min_size=2, max_size=24
    ),
    owners=st.lists(st.integers(0, 2), min_size=24, max_size=24),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
)
def test_any_split_scores_every_document_as_one_index(
    tmp_path_factory: pytest.TempPathFactory,
    bodies: list[list[str]],
    owners: list[int],
    query: list[str],
) -> None:
    """Equal-length documents split over up to three indexes in any way: each part
    searched with the summed statistics gives every document the score one index holding
    all of them gives it (query term frequency included)."""
    root = tmp_path_factory.mktemp("split")
    docs = _docs(bodies)
    parts = [[d for d, o in zip(docs, owners, strict=False) if o == p] for p in range(3)]
    backends = [_backend(root / f"p{p}", part) for p, part in enumerate(parts)]
    whole = _backend(root / "whole", docs)
    text = " ".join(query)
    combined = TermStatistics.combine(b.term_statistics(text, None) for b in backends)
    one = whole.term_statistics(text, None)
    assert combined.documents == one.documents == len(docs)
    assert {k: n for k, n in combined.doc_freqs if n} == {k: n for k, n in one.doc_freqs if n}
    merged = dict(
        itertools.chain.from_iterable(_scores(b, text, combined).items() for b in backends)
    )
    expected = _scores(whole, text)
    assert merged.keys() == expected.keys()
    for source_id, score in expected.items():
        assert merged[source_id] == pytest.approx(score, rel=1e-5)


def test_facade_statistics_edges(tmp_path: Path) -> None:
    backend = _backend(tmp_path / "i", _docs([["amber"] * LENGTH, ["basil"] * LENGTH]))
    facade = KeywordSearchFacade.index_backed([backend])
    stats = facade.term_statistics("amber")
    assert stats is not None and stats.documents == 2
    assert facade.term_statistics("a") is None  # shorter than a query
    assert facade.search("amber", 5, statistics="not statistics") == []  # type: ignore[arg-type]
    assert [h.source_id for h in facade.search("amber", 5, statistics=stats)] == ["d000"]
    # statistics naming other terms (or none) leave the index's own idf in place
    assert facade.search("amber", 5, statistics=TermStatistics(99)) == facade.search("amber", 5)
    assert facade.term_statistics("amber", language_id=2**70) is not None  # clamped, no raise
    assert KeywordSearchFacade.full_cascade([]).term_statistics("amber") is None
