"""The engine's keyword index keeps no copy of the text (the store has it): excerpts are
cut from the store for every strategy, and an index written in the older layout (body
stored) is rebuilt on open rather than trusted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import tantivy

from engine import CorpusConfig, Document, SearchEngine
from sparse import DEFAULT_TITLE_WEIGHT, SparseDocument, TantivyIndex, analyzers
from sparse.analyzers import Analyzer

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


def test_keyword_excerpts_anchor_on_the_term_rarest_in_the_index(tmp_path: Path) -> None:
    # "delta" is in every document, "peat" in one: the excerpt shows the peat, although
    # this text names the delta once and the peat three times (counting within the text
    # alone would anchor on the delta, at the start).
    filler = "The survey logged water depth and salinity at each station. " * 8
    target = Document(id="t", title="Core", text=f"delta {filler} peat peat peat layers.")
    others = [Document(id=f"o{i}", title="Core", text=f"delta {TEXT}") for i in range(6)]
    secret = Document(id="s", title="Core", text="peat delta", access_groups=frozenset({"x"}))
    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder=None))
        corpus.add([target, *others, secret])
        hits = corpus.search("peat delta")
        texts = corpus._store.public_bodies(["t", "s", "missing"])
    assert hits[0].source_id == "t"
    assert "peat" in hits[0].excerpt and not hits[0].excerpt.startswith("delta")
    assert "s" not in [h.source_id for h in hits]
    assert list(texts) == ["t"] and texts["t"].text == target.text  # public text only


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


def test_an_index_built_with_another_title_weight_is_rebuilt_on_open(tmp_path: Path) -> None:
    # Indexes from before title weights (or a weight the config does not name) are
    # derived data in the wrong layout: rebuilt from the store, never mixed with new docs.
    with SearchEngine(tmp_path) as eng:
        eng.create_corpus(CorpusConfig(name="c", embedder=None)).add(DOCS)
    directory = tmp_path / "corpora" / "c" / "tantivy"
    shutil.rmtree(directory)
    old = TantivyIndex(directory, store_text=False, title_weight=1)
    old.upsert([SparseDocument(source_id=d.id, title=d.title, text=d.text) for d in DOCS])
    old.close()
    with SearchEngine(tmp_path) as eng:
        assert eng.corpus("c").search("sand flood")[0].source_id == "d2"
    rebuilt = TantivyIndex(directory, store_text=False, title_weight=DEFAULT_TITLE_WEIGHT)
    assert rebuilt.doc_count() == len(DOCS)
    assert not TantivyIndex(directory, store_text=False, title_weight=1).is_available()


def test_the_corpus_title_weight_reaches_the_keyword_index(tmp_path: Path) -> None:
    docs = [
        Document(id="body", title="Heron", text="gannet seabird"),
        Document(id="title", title="Gannet", text="heron seabird"),
        Document(id="other", title="Petrel", text="storm seabird"),
    ]
    with SearchEngine(tmp_path) as eng:
        flat = eng.create_corpus(CorpusConfig(name="flat", embedder=None, title_weight=1))
        flat.add(docs)
        weighted = eng.create_corpus(CorpusConfig(name="weighted", embedder=None))
        weighted.add(docs)
        assert [h.source_id for h in flat.search("gannet")] == ["body", "title"]  # a tie
        assert [h.source_id for h in weighted.search("gannet")] == ["title", "body"]
    with SearchEngine(tmp_path) as eng:  # persisted with the corpus
        assert eng.corpus("flat").config.title_weight == 1
        assert eng.corpus("weighted").config.title_weight == DEFAULT_TITLE_WEIGHT


def test_an_index_built_by_the_previous_english_chain_is_rebuilt_on_open(
    tmp_path: Path,
) -> None:
    # ENGLISH v2 did not fold accents. Its index must not answer with the new chain's
    # query terms (no "meniere" would find "Ménière"): its tokenizer name differs, so
    # the engine rebuilds it from the store.
    docs = [*DOCS, Document(id="m", title="Ménière's disease", text="Vertigo and tinnitus.")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(analyzers, "_CHAIN_VERSIONS", {Analyzer.ENGLISH: 2})
        patch.setattr(
            analyzers, "_BUILDERS", {**analyzers._BUILDERS, Analyzer.ENGLISH: _english_v2}
        )
        with SearchEngine(tmp_path) as eng:
            corpus = eng.create_corpus(CorpusConfig(name="c", embedder=None))
            corpus.add(docs)
            assert corpus.search("meniere") == []
            assert corpus.search("Ménière")[0].source_id == "m"
    with SearchEngine(tmp_path) as eng:
        hits = eng.corpus("c").search("meniere vertigo")
    assert [h.source_id for h in hits] == ["m"]
    assert Analyzer.ENGLISH.tokenizer_name == "tandem_en_v4"


def _english_v2() -> tantivy.TextAnalyzer:
    builder = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
    builder = builder.filter(tantivy.Filter.remove_long(40))  # v2 cut at 40 bytes
    builder = builder.filter(tantivy.Filter.lowercase())
    builder = builder.filter(tantivy.Filter.stopword("english"))
    return builder.filter(tantivy.Filter.stemmer("english")).build()


def test_a_corpus_searches_each_language_with_its_own_analyzer(tmp_path: Path) -> None:
    docs = [
        Document(id="fr", title="Les chevaux", text="Les chevaux de course.", language_id=1),
        Document(id="es", title="Las casas", text="Las casas blancas.", language_id=2),
        Document(id="en", title="Horses", text="Race horses.", language_id=0),
    ]
    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(
            CorpusConfig(name="c", embedder=None, languages={1: "fr", 2: "es"})
        )
        corpus.add(docs)
        assert [h.source_id for h in corpus.search("cheval", language_id=1)] == ["fr"]
        assert [h.source_id for h in corpus.search("casa", language_id=2)] == ["es"]
        assert [h.source_id for h in corpus.search("horse")] == ["en"]
        # "les" is a French stop word: only the French field drops it
        assert corpus.search("les", language_id=1) == []
    # the index's fields are those of the analyzers it routes to: opened with another
    # language map, its schema does not match (the owner would rebuild it)
    directory = tmp_path / "corpora" / "c" / "tantivy"
    routed = {0: Analyzer.ENGLISH, 1: Analyzer.FRENCH, 2: Analyzer.SPANISH}
    assert TantivyIndex(directory, routed, store_text=False).doc_count() == 3
    assert not TantivyIndex(directory, {0: Analyzer.ENGLISH}, store_text=False).is_available()
