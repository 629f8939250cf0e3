"""``store_text=False``: the body is indexed but not stored — same ranking, no excerpt,
smaller index — and an index written the other way is refused on open, so its owner
rebuilds it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from sparse import (
    AccessContext,
    RetrievalQuery,
    SparseDocument,
    SparseIndexCorruptError,
    StoredBody,
    TantivyBackend,
    TantivyIndex,
)

PUBLIC = AccessContext.public_only()
FILLER = "the report describes measurements of river sediment and rainfall " * 40


def _docs() -> list[SparseDocument]:
    return [
        SparseDocument(
            source_id=f"d{i}",
            title=f"Report {i}",
            text=f"{FILLER} {'flood ' * (i % 7)} gauge{i}",
            url=f"/d{i}",
            public=i != 3,
        )
        for i in range(40)
    ]


def _search(index: TantivyIndex, text: str) -> list[tuple[str, float, str]]:
    query = RetrievalQuery(text=text, limit=50)
    return [
        (s.source_id, round(s.score or 0.0, 5), s.excerpt)
        for s in TantivyBackend(index).search(query, PUBLIC)
    ]


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_same_ranking_without_excerpts_and_a_smaller_index(tmp_path: Path) -> None:
    stored = TantivyIndex(tmp_path / "stored")
    bare = TantivyIndex(tmp_path / "bare", store_text=False)
    for index in (stored, bare):
        index.upsert(_docs())
    with_text = _search(stored, "flood gauge5")
    without = _search(bare, "flood gauge5")
    assert [(i, s) for i, s, _ in without] == [(i, s) for i, s, _ in with_text]
    assert with_text[0][0] == "d5" and "d3" not in [i for i, _, _ in without]
    assert all(excerpt for _, _, excerpt in with_text)
    assert all(excerpt == "" for _, _, excerpt in without)
    assert _dir_bytes(tmp_path / "bare") < _dir_bytes(tmp_path / "stored")


@pytest.mark.parametrize("written_with, opened_with", [(True, False), (False, True)])
def test_an_index_written_the_other_way_is_refused(
    tmp_path: Path, written_with: bool, opened_with: bool
) -> None:
    TantivyIndex(tmp_path / "i", store_text=written_with).upsert(_docs()[:2])
    other = TantivyIndex(tmp_path / "i", store_text=opened_with)
    assert other.is_available() is False
    with pytest.raises(SparseIndexCorruptError):
        other.view()
    other.clear()  # the owner's rebuild path
    other.upsert(_docs()[:2])
    assert other.doc_count() == 2


def test_bodies_from_the_owner_give_the_stored_index_s_excerpts(tmp_path: Path) -> None:
    stored = TantivyIndex(tmp_path / "stored")
    bare = TantivyIndex(tmp_path / "bare", store_text=False)
    for index in (stored, bare):
        index.upsert(_docs())
    bodies = {d.source_id: StoredBody(d.title, d.url, d.language_id, d.text) for d in _docs()}
    asked: list[list[str]] = []

    def owner_texts(ids: Sequence[str]) -> dict[str, StoredBody]:
        asked.append(list(ids))
        return {i: bodies[i] for i in ids if i != "d12"}  # one the owner no longer has

    backend = TantivyBackend(bare, texts=owner_texts)
    query = RetrievalQuery(text="flood gauge12", limit=50)
    with_owner = [(s.source_id, s.excerpt) for s in backend.search(query, PUBLIC)]
    with_text = [(s.source_id, s.excerpt) for s in TantivyBackend(stored).search(query, PUBLIC)]
    assert with_owner[0][0] == "d12" and with_owner[0][1] == ""
    assert with_owner[1:] == with_text[1:]  # anchored alike: on the index's rarest term
    assert "gauge" in with_text[0][1] and "flood" in with_text[1][1]
    assert asked == [[i for i, _ in with_owner]]  # once, for the hits returned
    backend.search(RetrievalQuery(text="flood", limit=5, excerpts=False), PUBLIC)
    assert len(asked) == 1  # ids only: nothing read
