"""TantivyIndex: add, update by id, delete, commit visibility, persistence, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparse.analyzers import Analyzer
from sparse.contracts import SparseDocument
from sparse.errors import SparseError, SparseIndexCorruptError
from sparse.tantivy_backend import TantivyBackend
from sparse.tantivy_index import TantivyIndex
from tests.sparse.backend_contract import PUBLIC, ids, query


def _titles(index: TantivyIndex, text: str) -> list[str]:
    return [s.title for s in TantivyBackend(index).search(query(text, limit=50), PUBLIC)]


def test_constructor_does_no_io(tmp_path: Path) -> None:
    TantivyIndex(tmp_path / "never" / "created")
    assert not (tmp_path / "never").exists()


def test_upsert_is_visible_when_the_call_returns(tmp_path: Path) -> None:
    index = TantivyIndex(tmp_path / "index")
    assert index.doc_count() == 0
    index.upsert([SparseDocument("a", "Alpha", "walrus")])
    assert index.doc_count() == 1
    assert _titles(index, "walrus") == ["Alpha"]


def test_upsert_replaces_by_source_id(tmp_path: Path) -> None:
    index = TantivyIndex(tmp_path / "index")
    index.upsert([SparseDocument("a", "Old", "walrus"), SparseDocument("b", "Other", "seal")])
    index.upsert([SparseDocument("a", "New", "narwhal")])
    assert index.doc_count() == 2
    assert _titles(index, "walrus") == []
    assert _titles(index, "narwhal") == ["New"]


def test_last_duplicate_in_one_batch_wins(tmp_path: Path) -> None:
    index = TantivyIndex(tmp_path / "index")
    index.upsert([SparseDocument("a", "First", "walrus"), SparseDocument("a", "Second", "walrus")])
    assert index.doc_count() == 1
    assert _titles(index, "walrus") == ["Second"]


def test_update_can_make_a_document_non_public(tmp_path: Path) -> None:
    index = TantivyIndex(tmp_path / "index")
    index.upsert([SparseDocument("a", "Alpha", "walrus")])
    index.upsert([SparseDocument("a", "Alpha", "walrus", public=False)])
    assert _titles(index, "walrus") == []
    assert index.doc_count() == 0  # not indexed at all (see the next test)


def test_non_public_documents_do_not_move_the_order_of_public_hits(tmp_path: Path) -> None:
    """Regression: non-public documents were indexed and only filtered out, so they
    counted in BM25's statistics, and which of two public hits came first told an
    anonymous caller which word non-public documents hold."""
    orders = []
    for secret in ("alpha", "beta"):
        index = TantivyIndex(tmp_path / secret)
        index.upsert(
            [
                SparseDocument("d-alpha", "", "alpha common"),
                SparseDocument("d-beta", "", "beta common"),
            ]
            + [SparseDocument(f"m{i}", "", f"memo {secret}", public=False) for i in range(30)]
        )
        hits = TantivyBackend(index).search(query("alpha beta"), PUBLIC)
        orders.append([(hit.source_id, hit.score) for hit in hits])
        assert index.doc_count() == 2
    assert orders[0] == orders[1]


def test_delete_removes_and_ignores_unknown_ids(tmp_path: Path) -> None:
    index = TantivyIndex(tmp_path / "index")
    index.upsert([SparseDocument("a", "Alpha", "walrus"), SparseDocument("b", "Beta", "walrus")])
    index.delete(["a", "does-not-exist"])
    assert index.doc_count() == 1
    assert _titles(index, "walrus") == ["Beta"]
    index.delete([])
    assert index.doc_count() == 1


def test_persists_across_close_and_a_new_instance(tmp_path: Path) -> None:
    index = TantivyIndex(tmp_path / "index")
    index.upsert([SparseDocument("a", "Alpha", "walrus", url="/a", page_uid=7, language_id=0)])
    index.close()
    reopened = TantivyIndex(tmp_path / "index")
    (hit,) = TantivyBackend(reopened).search(query("walrus"), PUBLIC)
    assert (hit.source_id, hit.url, hit.page_uid) == ("a", "/a", 7)
    assert index.doc_count() == 1  # a closed instance reopens lazily


def test_two_instances_see_each_others_commits(tmp_path: Path) -> None:
    writer, reader = TantivyIndex(tmp_path / "index"), TantivyIndex(tmp_path / "index")
    assert reader.doc_count() == 0
    writer.upsert([SparseDocument("a", "Alpha", "walrus")])
    reader.commit()
    assert reader.doc_count() == 1


def test_clear_empties_the_index(tmp_path: Path) -> None:
    index = TantivyIndex(tmp_path / "index")
    index.upsert([SparseDocument("a", "Alpha", "walrus")])
    index.clear()
    assert index.doc_count() == 0
    index.upsert([SparseDocument("b", "Beta", "walrus")])
    assert _titles(index, "walrus") == ["Beta"]


def test_analyzer_map_decides_the_field(tmp_path: Path) -> None:
    index = TantivyIndex(tmp_path / "index", {0: Analyzer.SIMPLE})
    index.upsert([SparseDocument("a", "Alpha", "studies")])
    backend = TantivyBackend(index)
    assert ids(backend.search(query("studies"), PUBLIC)) == ["a"]
    assert backend.search(query("study"), PUBLIC) == []  # SIMPLE does not stem


@pytest.mark.parametrize(
    "doc",
    [
        SparseDocument("", "no id", "text"),
        SparseDocument("a", "t", "x", language_id=-1),
        SparseDocument("a", "t", "x", language_id=2**63),
        SparseDocument("a", "t", "x", page_uid=2**64),
    ],
)
def test_invalid_documents_raise_value_error_and_write_nothing(
    tmp_path: Path, doc: SparseDocument
) -> None:
    index = TantivyIndex(tmp_path / "index")
    with pytest.raises(ValueError):
        index.upsert([SparseDocument("ok", "fine", "walrus"), doc])
    assert index.doc_count() == 0


def test_non_documents_and_non_string_ids_raise_value_error(tmp_path: Path) -> None:
    index = TantivyIndex(tmp_path / "index")
    with pytest.raises(ValueError):
        index.upsert([{"source_id": "a"}])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        index.delete([1])  # type: ignore[list-item]


def test_a_read_only_index_that_cannot_open_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An index built by another version (another schema) or damaged cannot open read-only,
    and nothing can rebuild it there: every search fails over to the owner's fallback. It
    used to do so without a word; now one warning says why, not one per search."""
    writer = TantivyIndex(tmp_path / "ix")
    writer.upsert([SparseDocument("a", "Alpha", "walrus")])
    writer.close()
    (tmp_path / "ix" / "meta.json").write_text("{not json", encoding="utf-8")
    reader = TantivyIndex(tmp_path / "ix", read_only=True)
    with caplog.at_level("WARNING", logger="sparse.tantivy_index"):
        for _ in range(3):
            with pytest.raises(SparseIndexCorruptError):
                reader.view()
    told = [r for r in caplog.records if "cannot be opened read-only" in r.getMessage()]
    assert len(told) == 1 and "a writable open rebuilds it" in told[0].getMessage()


def test_a_single_id_or_document_is_refused_not_read_piecewise(tmp_path: Path) -> None:
    """Regression: ``delete("abc")`` deleted the documents "a", "b" and "c" (a string is
    a collection of characters) and kept "abc"."""
    index = TantivyIndex(tmp_path / "ix")
    index.upsert([SparseDocument(i, i, "walrus") for i in ("a", "b", "abc")])
    with pytest.raises(ValueError, match="not a single string"):
        index.delete("abc")
    with pytest.raises(ValueError, match="not a single one"):
        index.upsert(SparseDocument("d", "D", "walrus"))  # type: ignore[arg-type]
    assert sorted(_titles(index, "walrus")) == ["a", "abc", "b"]


@pytest.mark.parametrize(
    "doc",
    [
        SparseDocument(7, "T", "x"),  # type: ignore[arg-type]
        SparseDocument("a", None, "x"),  # type: ignore[arg-type]
        SparseDocument("a", "T", b"x"),  # type: ignore[arg-type]
        SparseDocument("a", "T", "x", url=None),  # type: ignore[arg-type]
    ],
)
def test_a_field_of_the_wrong_type_is_named(tmp_path: Path, doc: SparseDocument) -> None:
    """Regression: these failed inside tantivy's binding (TypeError, AttributeError)."""
    index = TantivyIndex(tmp_path / "ix")
    with pytest.raises(ValueError, match=r"source_id|title|text|url"):
        index.upsert([doc])
    assert index.doc_count() == 0


def test_a_reload_that_cannot_read_the_new_files_is_a_sparse_error(tmp_path: Path) -> None:
    # Another process's commit whose files went before this one reloaded (a drop and a
    # re-create under way): tantivy's own ValueError reached a search unwrapped.
    def doc(source_id: str) -> SparseDocument:
        return SparseDocument(source_id=source_id, title="t", text="hello", url="", public=True)

    first = TantivyIndex(tmp_path / "idx")
    first.upsert([doc("a")])
    before = set((tmp_path / "idx").iterdir())
    TantivyIndex(tmp_path / "idx").upsert([doc("b")])  # another writer's commit
    for written in set((tmp_path / "idx").iterdir()) - before:
        if written.suffix == ".term":
            written.unlink()
    with pytest.raises(SparseError, match="cannot reload"):
        first.commit()
