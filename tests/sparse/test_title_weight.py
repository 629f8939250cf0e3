"""The title is indexed ``title_weight`` times ahead of the body (BM25F in one field):
scores equal BM25 computed by hand over that text, a title match outranks the same match
in the body, and an index built with another weight does not open (its owner rebuilds)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparse import DEFAULT_TITLE_WEIGHT, MAX_TITLE_WEIGHT, SparseDocument, TantivyIndex
from sparse.tantivy_backend import TantivyBackend
from sparse.tantivy_schema import indexed_text
from tests.sparse.backend_contract import PUBLIC, ids, query

K1, B = 1.2, 0.75  # tantivy's BM25 constants

DOCS = [
    SparseDocument("a", "Gannet colony", "seabirds nest on the cliff"),
    SparseDocument("b", "Cliff erosion", "a gannet colony on the headland"),
    SparseDocument("c", "", "storm waves cut the headland"),
    SparseDocument("d", "Tide tables", "gannet gannet"),
]


def tokens(doc: SparseDocument, weight: int) -> list[str]:
    """What the English analyzer keeps for these plain lowercase-able words (no stemming
    changes them; stop words dropped)."""
    stop = {"the", "a", "on"}
    words = indexed_text(doc.title, doc.text, weight).lower().split()
    return [w for w in words if w not in stop]


def bm25(term: str, doc: SparseDocument, weight: int) -> float:
    lengths = [len(tokens(d, weight)) for d in DOCS]
    avgdl = sum(lengths) / len(DOCS)
    df = sum(term in tokens(d, weight) for d in DOCS)
    idf = math.log(1 + (len(DOCS) - df + 0.5) / (df + 0.5))
    mine = tokens(doc, weight)
    tf = mine.count(term)
    return idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(mine) / avgdl))


@pytest.mark.parametrize("weight", [1, 2, 3, 5])
@pytest.mark.parametrize("term", ["gannet", "colony", "cliff", "headland"])
def test_scores_are_bm25_over_the_title_repeated(tmp_path: Path, weight: int, term: str) -> None:
    index = TantivyIndex(tmp_path / "index", store_text=False, title_weight=weight)
    index.upsert(DOCS)
    hits = TantivyBackend(index).search(query(term), PUBLIC)
    expected = {d.source_id: bm25(term, d, weight) for d in DOCS if term in tokens(d, 1)}
    assert {h.source_id for h in hits} == set(expected)
    for hit in hits:
        assert hit.score == pytest.approx(expected[hit.source_id], rel=1e-4)


def test_a_title_match_outranks_the_same_match_in_the_body(tmp_path: Path) -> None:
    docs = [
        SparseDocument("body", "Heron", "gannet seabird"),
        SparseDocument("title", "Gannet", "heron seabird"),
        SparseDocument("other", "Petrel", "storm seabird"),
    ]
    order = {}
    for weight in (1, 3):
        index = TantivyIndex(tmp_path / f"w{weight}", store_text=False, title_weight=weight)
        index.upsert(docs)
        hits = TantivyBackend(index).search(query("gannet"), PUBLIC)
        order[weight] = (ids(hits), [h.score for h in hits])
    # Weight 1: the same words in another order, an exact tie (broken by source id).
    assert order[1][0] == ["body", "title"] and order[1][1][0] == order[1][1][1]
    assert order[3][0] == ["title", "body"] and order[3][1][0] > order[3][1][1]


@given(
    title=st.text(max_size=30),
    text=st.text(max_size=60),
    weight=st.integers(1, MAX_TITLE_WEIGHT),
)
@settings(max_examples=200, deadline=None)
def test_indexed_text_repeats_the_title_and_keeps_the_body(
    title: str, text: str, weight: int
) -> None:
    out = indexed_text(title, text, weight)
    assert out.endswith(text)
    if title:
        assert out == "\n".join([title] * weight + [text])
    else:
        assert out == text


@pytest.mark.parametrize("bad", [0, MAX_TITLE_WEIGHT + 1, -1, True, 2.0, "3", None])
def test_a_title_weight_outside_1_to_max_is_refused(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="title_weight"):
        TantivyIndex(tmp_path / "index", title_weight=bad)  # type: ignore[arg-type]


def test_an_index_built_with_another_weight_does_not_open(tmp_path: Path) -> None:
    path = tmp_path / "index"
    built = TantivyIndex(path, title_weight=2)
    built.upsert(DOCS)
    built.close()
    assert not TantivyIndex(path, title_weight=DEFAULT_TITLE_WEIGHT).is_available()
    again = TantivyIndex(path, title_weight=2)
    assert again.is_available() and again.doc_count() == len(DOCS)
    assert again.title_weight == 2
