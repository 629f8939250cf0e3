"""Corpus writes: upsert semantics, vector re-use, deletes, validation, degradation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from engine import Corpus, CorpusConfig, Document, InvalidArgument, SearchEngine
from engine.limits import MAX_DOCUMENT_CHARS
from tests.support.fakes import SwitchableEmbedder

DOCS = [
    Document(id="a", title="Apple pie", text="Bake apples with cinnamon and butter."),
    Document(id="b", title="Banana bread", text="Ripe bananas make a moist loaf."),
    Document(id="c", title="Cherry tart", text="Sour cherries on shortcrust pastry."),
]


def test_add_counts_and_upsert(fast_engine: SearchEngine) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="food"))
    result = corpus.add(DOCS)
    assert (result.added, result.updated, result.degraded) == (3, 0, 0)
    changed = Document(id="b", title="Banana bread", text="Overripe bananas and walnuts.")
    result = corpus.add([changed, DOCS[0]])
    assert (result.added, result.updated, result.unchanged) == (0, 2, 1)
    assert len(corpus) == 3
    assert corpus.fetch_source("b").text == "Overripe bananas and walnuts."
    assert corpus.search("walnuts")[0].source_id == "b"


def test_unchanged_text_is_not_re_embedded(
    fast_engine: SearchEngine, hash_embedder: SwitchableEmbedder
) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="food"))
    corpus.add(DOCS)
    calls = hash_embedder.embed_calls
    corpus.add([Document(id="a", title="Apple pie", text=DOCS[0].text, url="/new-url")])
    assert hash_embedder.embed_calls == calls  # only the URL changed: vector re-used
    assert corpus.fetch_source("a").url == "/new-url"
    assert corpus.stats()["vectors"] == 3


def test_repeated_id_in_one_batch_last_wins(fast_engine: SearchEngine) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="food"))
    corpus.add([Document(id="x", text="first version"), Document(id="x", text="second version")])
    assert len(corpus) == 1
    assert corpus.fetch_source("x").text == "second version"


def test_delete(fast_engine: SearchEngine) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="food"))
    corpus.add(DOCS)
    assert corpus.delete(["a", "nope"]) == 1
    assert len(corpus) == 2
    assert all(h.source_id != "a" for h in corpus.search("apple cinnamon", top_k=10))
    assert corpus.stats()["vectors"] == 2


def test_invalid_document_stores_nothing(fast_engine: SearchEngine) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="food"))
    too_big = Document(id="big", text="x" * (MAX_DOCUMENT_CHARS + 1))
    with pytest.raises(InvalidArgument, match="text"):
        corpus.add([DOCS[0], too_big])
    for bad in (
        Document(id="two words"),
        Document(id="zero\u200bwidth"),
        Document(id=""),
        Document(id="ok", title="nul\x00"),
        Document(id="ok", language_id=-1),
    ):
        with pytest.raises(InvalidArgument):
            corpus.add([bad])
    assert len(corpus) == 0


def test_precomputed_embeddings_are_used(
    fast_engine: SearchEngine, hash_embedder: SwitchableEmbedder
) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="food"))
    vectors = hash_embedder.inner.embed([f"{d.title}\n{d.text}" for d in DOCS])
    calls = hash_embedder.embed_calls
    corpus.add(DOCS, embeddings=vectors)
    assert hash_embedder.embed_calls == calls
    assert corpus.stats()["vectors"] == 3
    with pytest.raises(InvalidArgument, match="shape"):
        corpus.add(DOCS, embeddings=vectors[:2])
    with pytest.raises(InvalidArgument, match="NaN"):
        corpus.add(DOCS, embeddings=np.full_like(vectors, np.nan))


def test_failed_embedding_is_stored_degraded_and_healed(
    fast_engine: SearchEngine, hash_embedder: SwitchableEmbedder
) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="food"))
    hash_embedder.failing = True
    result = corpus.add(DOCS)
    assert result.degraded == 3
    assert corpus.stats()["degraded"] == 3 and corpus.stats()["vectors"] == 0
    assert corpus.search("cherries pastry")[0].source_id == "c"  # keyword-searchable
    hash_embedder.failing = False
    assert corpus.repair() == 3
    assert corpus.stats()["degraded"] == 0 and corpus.stats()["vectors"] == 3
    assert corpus.repair() == 0


def test_vectors_off_corpus_refuses_embeddings(fast_engine: SearchEngine) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="kw", embedder=None))
    with pytest.raises(InvalidArgument):
        corpus.add(DOCS, embeddings=np.ones((3, 4), dtype=np.float32))
    assert corpus.add(DOCS).degraded == 0
    assert corpus.stats()["vectors"] == 0


def test_delete_refuses_a_bare_string(fast_engine: SearchEngine) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="food"))
    corpus.add([Document(id="a", text="x"), Document(id="b", text="y")])
    with pytest.raises(InvalidArgument, match="collection"):
        corpus.delete("ab")
    assert len(corpus) == 2


def test_updates_to_visibility_and_titles_are_seen_by_the_next_search(
    fast_engine: SearchEngine,
) -> None:
    corpus = fast_engine.create_corpus(CorpusConfig(name="kw", embedder=None))
    corpus.add([Document(id="a", title="Old title", text="shared marker words")])
    assert [h.title for h in corpus.search("marker")] == ["Old title"]  # now cached
    corpus.add([Document(id="a", title="New title", text="shared marker words")])
    assert [h.title for h in corpus.search("marker")] == ["New title"]
    corpus.add(
        [
            Document(
                id="a",
                title="New title",
                text="shared marker words",
                access_groups=frozenset({"staff"}),
            )
        ]
    )
    assert corpus.search("marker") == []
    corpus.add([Document(id="a", title="Public again", text="shared marker words")])
    assert [h.title for h in corpus.search("marker")] == ["Public again"]


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda c: c.add(Document(id="a", text="x")), "not a single Document"),
        (lambda c: c.add(None), "iterable of Documents, got NoneType"),
        (lambda c: c.add(42), "iterable of Documents, got int"),
        (lambda c: c.delete(None), "collection of ids, got NoneType"),
        (lambda c: c.repair(batch_size="5"), "batch_size"),
        (lambda c: c.repair(batch_size=True), "batch_size"),
        (lambda c: c.repair(batch_size=2.5), "batch_size"),
        (lambda c: c.repair(max_documents=1.5), "max_documents"),
        (lambda c: c.repair(lock_wait_s=float("inf")), "lock_wait_s"),
        (lambda c: c.repair(lock_wait_s=1e12), "lock_wait_s"),
        (lambda c: c.repair(lock_wait_s=-1), "lock_wait_s"),
        (lambda c: c.repair(lock_wait_s=float("nan")), "lock_wait_s"),
    ],
)
def test_wrong_argument_types_are_refused_in_the_engines_words(
    fast_engine: SearchEngine, call: Callable[[Corpus], object], says: str
) -> None:
    """Regression: raw TypeError / OverflowError escaped (``add(doc)``, ``delete(None)``,
    ``repair(lock_wait_s=inf)``), and a negative or NaN wait passed as no wait at all."""
    corpus = fast_engine.create_corpus(CorpusConfig(name="c"))
    with pytest.raises(InvalidArgument, match=says):
        call(corpus)
    corpus.add([Document(id="after", text="still writable")])  # nothing held
    assert len(corpus) == 1


def test_the_size_on_disk_skips_a_file_that_vanishes_while_it_counts(
    fast_engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: ``stats`` raised StorageError when tantivy's merge or a vector save
    removed a file between the listing and its ``stat``."""
    corpus = fast_engine.create_corpus(CorpusConfig(name="c"))
    corpus.add([Document(id="a", text="alpha")])
    listed = list(corpus._indexes._dir.rglob("*"))
    gone = corpus._indexes._dir / "tantivy" / "merged-away.store"
    monkeypatch.setattr(Path, "rglob", lambda self, pattern: iter([gone, *listed]))
    monkeypatch.setattr(Path, "is_file", lambda self: True)
    assert corpus.stats()["index_bytes"] > 0
