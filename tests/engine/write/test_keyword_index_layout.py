"""The engine's keyword index keeps no copy of the text (the store has it): excerpts are
cut from the store for every strategy, and an index written in the older layout (body
stored) is rebuilt on open rather than trusted."""

from __future__ import annotations

import shutil
from pathlib import Path

from engine import CorpusConfig, Document, SearchEngine
from sparse import SparseDocument, TantivyIndex

TEXT = "Sediment cores from the delta show {word} layers deposited after each flood."
DOCS = [
    Document(id=f"d{i}", title=f"Core {i}", text=TEXT.format(word=w), url=f"/d{i}")
    for i, w in enumerate(["clay", "silt", "sand", "peat", "gravel"])
]


def test_keyword_excerpts_come_from_the_store(tmp_path: Path) -> None:
    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder=None))
        corpus.add(DOCS)
        hits = corpus.search("peat layers")
    assert hits[0].source_id == "d3"
    assert "peat" in hits[0].excerpt
    index = TantivyIndex(tmp_path / "corpora" / "c" / "tantivy", store_text=False)
    assert index.is_available()


def test_an_index_in_the_old_layout_is_rebuilt_on_open(tmp_path: Path) -> None:
    with SearchEngine(tmp_path) as eng:
        eng.create_corpus(CorpusConfig(name="c", embedder=None)).add(DOCS)
    directory = tmp_path / "corpora" / "c" / "tantivy"
    shutil.rmtree(directory)
    old = TantivyIndex(directory, store_text=True)  # body stored: the earlier layout
    old.upsert(
        [SparseDocument(source_id=d.id, title=d.title, text=d.text, url=d.url) for d in DOCS]
    )
    old.close()
    with SearchEngine(tmp_path) as eng:
        corpus = eng.corpus("c")
        hits = corpus.search("gravel deposited")
        assert hits[0].source_id == "d4"
        assert "gravel" in hits[0].excerpt
    assert TantivyIndex(directory, store_text=False).doc_count() == len(DOCS)
