"""How the tantivy backend ranks: query term frequency, the English text preparation, and
ties ordered by source id whatever the index layout (thread count, segments)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest

import sparse.tantivy_index as tantivy_index
from sparse.analyzers import Analyzer
from sparse.contracts import EvidenceSource, SparseDocument
from sparse.tantivy_backend import TantivyBackend
from sparse.tantivy_index import TantivyIndex
from tests.sparse.backend_contract import PUBLIC, ids, query


def backend(path: Path, docs: Sequence[SparseDocument]) -> TantivyBackend:
    index = TantivyIndex(path, store_text=False)
    index.upsert(docs)
    return TantivyBackend(index)


def scores(sources: Sequence[EvidenceSource]) -> dict[str, float]:
    return {s.source_id: s.score or 0.0 for s in sources}


# --- query term frequency ---------------------------------------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> TantivyBackend:
    docs = [
        SparseDocument("rare", "", "quokka"),
        SparseDocument("common", "", "wombat"),
        SparseDocument("c2", "", "wombat koala"),
        SparseDocument("c3", "", "wombat emu"),
        SparseDocument("c4", "", "emu koala"),
    ]
    return backend(tmp_path_factory.mktemp("qtf") / "index", docs)


def test_a_repeated_query_term_weighs_its_count(small: TantivyBackend) -> None:
    once = scores(small.search(query("wombat"), PUBLIC))
    twice = scores(small.search(query("wombat wombat"), PUBLIC))
    thrice = scores(small.search(query("Wombats, wombat and WOMBAT"), PUBLIC))
    assert set(once) == set(twice) == set(thrice) == {"common", "c2", "c3"}
    for doc_id, score in once.items():
        assert twice[doc_id] == pytest.approx(2 * score, rel=1e-5)
        assert thrice[doc_id] == pytest.approx(3 * score, rel=1e-5)


def test_query_term_frequency_can_reorder_hits(small: TantivyBackend) -> None:
    # quokka (1 doc of 5) is rarer than wombat (3 of 5): once each, the rare term wins;
    # said four times, wombat outweighs it.
    assert ids(small.search(query("quokka wombat"), PUBLIC))[0] == "rare"
    assert ids(small.search(query("quokka wombat wombat wombat wombat"), PUBLIC))[0] == "common"


# --- English text preparation ---------------------------------------------------------


def test_english_prepare_drops_possessives_and_latin_abbreviations() -> None:
    prepare = Analyzer.ENGLISH.prepare
    assert prepare("the author's view").split() == ["the", "author", "view"]
    assert prepare("John\u2019s car").split() == ["John", "car"]
    assert prepare("tools (e.g. saws, i.e., E.G. I.e.)").split() == [
        "tools",
        "(",
        "saws,",
        ",",
        ")",
    ]
    assert prepare("it's") == "it"  # contraction or possessive: a lone s either way
    assert prepare("don't stop at 3.5 g; 's x") == "don't stop at 3.5 g; 's x"
    assert Analyzer.GERMAN.prepare("Peter's e.g.") == "Peter's e.g."  # English only


def test_possessive_and_abbreviations_match_no_single_letter_documents(tmp_path: Path) -> None:
    search = backend(
        tmp_path / "index",
        [
            SparseDocument("letters", "", "s e g i"),
            SparseDocument("author", "", "an author wrote"),
        ],
    )
    assert ids(search.search(query("the author's notes, e.g. drafts, i.e. sketches"), PUBLIC)) == [
        "author"
    ]
    assert ids(search.search(query("letters e g"), PUBLIC)) == ["letters"]  # plain letters stay


def test_english_chain_version_is_in_its_tokenizer_name() -> None:
    # A changed chain must not silently reuse an index built by the old one: the name is
    # part of the schema, and a schema mismatch makes the owner rebuild.
    assert Analyzer.ENGLISH.tokenizer_name == "tandem_en_v4"
    assert Analyzer.GERMAN.tokenizer_name == "tandem_de_v2"


# --- deterministic ties -----------------------------------------------------------------


def tie_corpus(seed: int) -> list[SparseDocument]:
    """600 documents, shuffled: groups of identical texts (exact BM25 ties) and fillers."""
    docs = [
        SparseDocument(f"dup-{n:03d}", "Gannet", "gannet colony on the cliff") for n in range(40)
    ]
    docs += [SparseDocument(f"half-{n:03d}", "", "gannet") for n in range(30)]
    docs += [
        SparseDocument(f"fill-{n:03d}", "", f"filler text number {n} cliff") for n in range(530)
    ]
    random.Random(seed).shuffle(docs)
    return docs


def build_with_threads(path: Path, docs: Sequence[SparseDocument], threads: int) -> TantivyBackend:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tantivy_index, "_BULK_DOCS", 1)
        patch.setattr(tantivy_index, "_bulk_threads", lambda: threads)
        index = TantivyIndex(path, store_text=False)
        for start in range(0, len(docs), 150):  # several commits
            index.upsert(docs[start : start + 150])
    return TantivyBackend(index)


@pytest.fixture(scope="module")
def two_builds(tmp_path_factory: pytest.TempPathFactory) -> tuple[TantivyBackend, TantivyBackend]:
    """One corpus built twice: one indexing thread in one order, four in another."""
    root = tmp_path_factory.mktemp("ties")
    return (
        build_with_threads(root / "one", tie_corpus(1), 1),
        build_with_threads(root / "four", tie_corpus(2), 4),
    )


def raw_order(search: TantivyBackend, text: str) -> list[str]:
    """Tantivy's own order (ties by document address), for contrast."""
    view = search.index.view()
    parsed = search.index._open().parse_query(text, [Analyzer.ENGLISH.field_name])
    hits = view.searcher.search(parsed, 40).hits
    return [view.searcher.doc(address)["source_id"][0] for _, address in hits]


def test_the_two_builds_order_ties_differently_inside_tantivy(
    two_builds: tuple[TantivyBackend, TantivyBackend],
) -> None:
    one, four = two_builds
    assert raw_order(one, "gannet colony") != raw_order(four, "gannet colony")


@pytest.mark.parametrize("limit", [1, 5, 39, 40, 41, 55, 100, 500])
def test_two_builds_rank_identically_and_ties_go_by_source_id(
    two_builds: tuple[TantivyBackend, TantivyBackend], limit: int
) -> None:
    one, four = two_builds
    for text in ("gannet cliff", "gannet", "cliff colony"):
        a = one.search(query(text, limit=limit), PUBLIC)
        b = four.search(query(text, limit=limit), PUBLIC)
        assert [(s.source_id, s.score) for s in a] == [(s.source_id, s.score) for s in b]
        keys = [(-(s.score or 0.0), s.source_id) for s in a]
        assert keys == sorted(keys)  # score descending, then source id ascending
    # The 40 identical "dup" documents tie: a cut inside the group keeps the smallest ids.
    top = ids(one.search(query("gannet colony", limit=limit), PUBLIC))
    assert top[: min(limit, 40)] == [f"dup-{n:03d}" for n in range(min(limit, 40))]
