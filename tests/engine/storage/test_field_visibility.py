"""Filters read public documents' field rows only: what a filtered query costs must not
tell how many non-public documents carry a value (a timing channel: 40,000 private
carriers made an allow-list query 18 ms instead of 0.04). ``document_fields`` carries
each row's ``is_public``; a store from before the column gets it on a writable open.

The work a query does is counted in SQLite VM instructions (a progress handler called on
every instruction), which is deterministic where a clock is not."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from engine import CorpusConfig, Document, SearchEngine
from engine.storage import DocumentStore
from engine.storage.like_backend import DatabaseLikeBackend
from engine.storage.records import EmbeddingStatus, StoredDocument
from engine.storage.schema import SCHEMA_VERSION, migrate
from sparse import AccessContext, RangeFilter, RetrievalQuery, TermsFilter

PUBLIC = AccessContext()
TAG = (TermsFilter(field="tag", values=("x",)),)
YEAR = (RangeFilter(field="year", low=2000, high=2010),)


def _doc(sid: str, *, public: bool, vector: bool = True) -> StoredDocument:
    return StoredDocument(
        source_id=sid,
        title="t",
        text="volcano lava",
        url="",
        language_id=0,
        access_groups=frozenset() if public else frozenset({"staff"}),
        page_uid=None,
        content_hash=sid,
        embedding_status=EmbeddingStatus.EMBEDDED,
        embedding=np.ones(4, np.float32) if vector else None,
        fields=(("tag", "x"), ("year", 2005)),
    )


def _store(path: Path, private: int) -> DocumentStore:
    store = DocumentStore(path)
    docs = [_doc(f"p{i}", public=True) for i in range(20)]
    docs += [_doc(f"s{i:05}", public=False) for i in range(private)]
    store.upsert(docs, "m")
    return store


def _instructions(store: DocumentStore, query: Callable[[], object]) -> int:
    """SQLite VM instructions ``query`` runs on this thread's connection."""
    conn = store.connection()
    count = 0

    def tick() -> int:
        nonlocal count
        count += 1
        return 0

    conn.set_progress_handler(tick, 1)
    try:
        query()
    finally:
        conn.set_progress_handler(None, 1)
    return count


QUERIES: dict[str, Callable[[DocumentStore], object]] = {
    "allow-list, terms": lambda s: s.public_vector_ids(None, TAG),
    "allow-list, range": lambda s: s.public_vector_ids(None, YEAR),
    "browse": lambda s: s.public_filtered_ids(TAG + YEAR, None, 10),
    "headers": lambda s: s.headers(["p1", "p2", "s00001"], filters=TAG),
    "field values": lambda s: s.keyword_values("tag", "X", 10),
    "database fallback": lambda s: DatabaseLikeBackend(s).search(
        RetrievalQuery(text="lava", limit=5, filters=TAG + YEAR), PUBLIC
    ),
}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_a_filtered_query_costs_the_same_whatever_private_documents_carry(
    tmp_path: Path, name: str
) -> None:
    query = QUERIES[name]
    few, many = _store(tmp_path / "few.sqlite3", 10), _store(tmp_path / "many.sqlite3", 3000)
    try:
        assert query(few) == query(many)  # the same public answer
        # Not a bound with slack: before the column, ``many`` ran ~100x more instructions
        # (every carrier's row read); now the plan seeks past them, and the count is
        # independent of the private rows (a B-tree seek is one instruction at any depth).
        assert _instructions(many, lambda: query(many)) == _instructions(few, lambda: query(few))
    finally:
        few.close()
        many.close()


def test_a_document_made_private_leaves_the_public_field_rows(tmp_path: Path) -> None:
    store = _store(tmp_path / "s.sqlite3", 0)
    try:
        store.upsert([_doc("p3", public=False)], "m")
        assert "p3" not in store.public_vector_ids(None, TAG)
        assert "p3" not in store.public_filtered_ids(TAG, None, 100)
        rows = store.connection().execute(
            "SELECT DISTINCT is_public FROM document_fields WHERE source_id = 'p3'"
        )
        assert rows.fetchall() == [(0,)]
        store.upsert([_doc("p3", public=True)], "m")
        assert "p3" in store.public_filtered_ids(TAG, None, 100)
    finally:
        store.close()


# -- stores written before the column ----------------------------------------------------


def _as_schema_1(store_path: Path) -> None:
    """Rewrite a store into the layout the previous version wrote (no ``is_public`` in
    ``document_fields``, the old value indexes, ``schema_version`` 1)."""
    with sqlite3.connect(store_path) as db:
        db.execute("DROP TRIGGER document_fields_visibility")
        for index in ("public_text", "public_text_nocase", "public_int"):
            db.execute(f"DROP INDEX document_fields_{index}")
        db.execute("ALTER TABLE document_fields DROP COLUMN is_public")
        db.execute("CREATE INDEX document_fields_text ON document_fields(name, value_text)")
        db.execute("CREATE INDEX document_fields_int ON document_fields(name, value_int)")
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.close()


DOCS = [
    Document(id="a", title="Lava", text="volcano lava", fields={"tag": "x", "year": 2005}),
    Document(id="b", title="Ash", text="volcano ash", fields={"tag": "x", "year": 2001}),
    Document(
        id="c",
        title="Lava staff",
        text="volcano lava notes",
        fields={"tag": "x", "year": 2005},
        access_groups=frozenset({"staff"}),
    ),
]
CONFIG = CorpusConfig(name="docs", embedder=None, fields={"tag": "keyword", "year": "integer"})


@pytest.fixture
def old_store(tmp_path: Path) -> Iterator[Path]:
    with SearchEngine(tmp_path) as engine:
        engine.create_corpus(CONFIG).add(DOCS)
    path = tmp_path / "corpora" / "docs" / "store.sqlite3"
    _as_schema_1(path)
    yield path


def _filtered(engine: SearchEngine) -> list[str]:
    corpus = engine.corpus("docs")
    return sorted(h.source_id for h in corpus.search("volcano", filters={"tag": "x"}))


def test_a_read_only_open_of_an_old_store_filters_as_before(
    tmp_path: Path, old_store: Path
) -> None:
    with SearchEngine(tmp_path, read_only=True) as engine:
        assert _filtered(engine) == ["a", "b"]
        corpus = engine.corpus("docs")
        assert [h.source_id for h in corpus.search("lava", filters={"year": [2005]})] == ["a"]
    with sqlite3.connect(old_store) as db:  # still the old layout: nothing was written
        columns = [r[1] for r in db.execute("PRAGMA table_info(document_fields)")]
    db.close()
    assert "is_public" not in columns


def test_a_writable_open_migrates_an_old_store(tmp_path: Path, old_store: Path) -> None:
    with SearchEngine(tmp_path) as engine:
        assert _filtered(engine) == ["a", "b"]
    with sqlite3.connect(old_store) as db:
        visibility = dict(db.execute("SELECT DISTINCT source_id, is_public FROM document_fields"))
        indexes = {
            str(r[0])
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' "
                "AND tbl_name = 'document_fields'"
            )
        }
        version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    db.close()
    assert visibility == {"a": 1, "b": 1, "c": 0}
    assert version == (str(SCHEMA_VERSION),)
    assert "document_fields_text" not in indexes and "document_fields_int" not in indexes
    assert {"document_fields_public_text", "document_fields_public_int"} <= indexes


def test_a_migrated_store_is_not_written_again_on_open(tmp_path: Path) -> None:
    """An open of a current store stays a read: no transaction, no WAL frame."""
    with SearchEngine(tmp_path) as engine:
        engine.create_corpus(CONFIG).add(DOCS)
    assert _an_open_writes_nothing(tmp_path / "corpora" / "docs" / "store.sqlite3")


def _an_open_writes_nothing(path: Path) -> bool:
    """Whether a writable open of the store at ``path`` commits nothing (another
    connection's ``PRAGMA data_version`` moves with every commit but its own)."""
    store = DocumentStore(path)
    try:
        before = store.connection().execute("PRAGMA data_version").fetchone()
        DocumentStore(path).close()
        return bool(store.connection().execute("PRAGMA data_version").fetchone() == before)
    finally:
        store.close()


def test_field_rows_an_older_writer_inserts_after_the_migration_are_flagged(
    tmp_path: Path, old_store: Path
) -> None:
    """A rolling restart: a process of the previous version writes a migrated store. Its
    field rows name no ``is_public`` (``DEFAULT 0``: a public document hidden from
    filters for good); the schema's trigger flags them from their document, and the
    indexes that process puts back are dropped at this version's next writable open."""
    with SearchEngine(tmp_path) as engine:  # migrates
        assert _filtered(engine) == ["a", "b"]
    with sqlite3.connect(old_store) as db:  # the previous version's upsert of "b", and open
        db.execute("DELETE FROM document_fields WHERE source_id = 'b'")
        db.execute(
            "INSERT INTO document_fields(source_id, name, value_text, value_int) "
            "VALUES ('b', 'tag', 'x', NULL), ('b', 'year', NULL, 2001)"
        )
        db.execute(
            "CREATE INDEX IF NOT EXISTS document_fields_text ON document_fields(name, value_text)"
        )
    db.close()
    with SearchEngine(tmp_path, read_only=True) as engine:
        assert _filtered(engine) == ["a", "b"]
    with SearchEngine(tmp_path) as engine:
        assert _filtered(engine) == ["a", "b"]
    with sqlite3.connect(old_store) as db:
        indexes = {str(r[0]) for r in db.execute("SELECT name FROM sqlite_master")}
        flags = db.execute("SELECT DISTINCT is_public FROM document_fields WHERE source_id = 'b'")
        assert flags.fetchall() == [(1,)]
    db.close()
    assert "document_fields_text" not in indexes


def test_a_newer_versions_store_keeps_its_stamp_and_is_not_written_on_open(
    tmp_path: Path,
) -> None:
    with SearchEngine(tmp_path) as engine:
        engine.create_corpus(CONFIG).add(DOCS)
    path = tmp_path / "corpora" / "docs" / "store.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    db.close()
    assert _an_open_writes_nothing(path)
    with sqlite3.connect(path) as db:
        stamp = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    db.close()
    assert stamp == ("3",)


def test_a_migration_without_room_rolls_back_whole_and_says_what_it_needs(
    tmp_path: Path, old_store: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A review found the upgrade needs about the store's size free (the change passes
    through the write-ahead log) and nobody was told. Out of room — here the store may
    not grow by a page (``max_page_count``), as on a full disk — it rolls back whole and
    the log says why and how much it needs."""
    db = sqlite3.connect(old_store, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages}")
        with caplog.at_level("WARNING"), pytest.raises(sqlite3.OperationalError, match="full"):
            migrate(db)
        columns = [r[1] for r in db.execute("PRAGMA table_info(document_fields)")]
        version = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    finally:
        db.close()
    assert "is_public" not in columns and version == ("1",)  # rolled back whole
    assert any("no room for the migration" in r.getMessage() for r in caplog.records)
    with SearchEngine(tmp_path) as engine:  # with room, the next open migrates it
        assert _filtered(engine) == ["a", "b"]
