"""Excerpts: the keyword index cuts them for every passage holding a query term (anchored
on the term rarest in the index, whichever strategy ran); the engine's own cut, for the
rest, anchors on the query term rarest in the text."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

from dense.local import SentenceTransformerEmbedder
from engine import CorpusConfig, Document, SearchEngine
from engine.search.excerpts import excerpt_for, query_terms
from sparse import MAX_EXCERPT_LENGTH
from sparse.analyzers import MAX_TOKEN_BYTES
from sparse.excerpt import _foldable
from tests.support.fakes import SwitchableEmbedder


def test_excerpt_anchors_on_the_rarest_term_in_the_text() -> None:
    text = " ".join(f"filler{i}" for i in range(2_000)) + " the needle is here " + "x " * 500
    excerpt = excerpt_for(text, query_terms("needle filler7"))
    assert "needle" in excerpt
    assert len(excerpt) <= MAX_EXCERPT_LENGTH


def test_no_match_gives_the_start_and_short_texts_are_whole() -> None:
    text = "alpha " * 200
    assert excerpt_for(text, ["zzz"]).startswith("alpha")
    assert excerpt_for("short text", ["short"]) == "short text"


def test_query_terms_skip_function_words_and_keep_the_longest_content_words() -> None:
    terms = query_terms("What is the effect of the boundary layer on the heat transfer?")
    assert terms == ["boundary", "transfer", "effect", "layer", "heat"]
    assert query_terms("what is it") == ["what", "is", "it"]  # nothing else to anchor on
    many = " ".join(f"word{i:02d}" for i in range(30))
    assert len(query_terms(many)) == 8


def test_query_terms_read_the_query_composed_and_keep_marks_inside_words() -> None:
    """Regression: a query typed with combining accents was split at each accent
    ("nie", "me", "re": the database fallback then matched unrelated documents), and a
    Devanagari word at each vowel sign (no term at all)."""
    assert query_terms(unicodedata.normalize("NFD", "Ménière's disease")) == ["disease", "ménière"]
    assert query_terms("हिन्दी भाषा") == ["हिन्दी", "भाषा"]


def test_excerpts_anchor_where_the_index_found_the_folded_word(tmp_path: Path) -> None:
    """Regression, with the real index: the rarest word, spelled with accents only in the
    document, lost to a common one ("meniere disease" showed "The disease is common"),
    and Vietnamese letters were not folded at all ("nguyen" showed the text's start)."""
    pad = "lorem ipsum dolor sit amet " * 30
    docs = [
        Document(
            id="m",
            title="Inner ear",
            text=f"The disease is common. {pad}Ménière described it first in 1861. {pad}",
        ),
        Document(id="v", title="Board", text=f"{pad}Ông Nguyễn Văn A là giám đốc. {pad}"),
        *(Document(id=f"x{i}", title="x", text=f"disease number {i}") for i in range(20)),
    ]
    with SearchEngine(tmp_path) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder=None))
        corpus.add(docs)
        meniere = {h.source_id: h.excerpt for h in corpus.search("meniere disease", top_k=30)}
        nguyen = {h.source_id: h.excerpt for h in corpus.search("nguyen", top_k=5)}
    assert "Ménière described" in meniere["m"]
    assert "Nguyễn Văn" in nguyen["v"]


def test_query_words_longer_than_the_index_keeps_are_not_terms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: query terms kept words of up to 2,000 characters, which every analyzer
    drops (``MAX_TOKEN_BYTES`` UTF-8 bytes or more), so the index named no word of such a
    query and every hit's excerpt compiled a fold pattern of one class a letter of it: a
    300-letter word cost ~40 ms a search, a 2,000-letter one 200 ms and 1.2 MB held. The
    cap counts bytes, as the analyzers do: 80 "é" are 160 bytes, 79 are 158."""
    short, long_ = "z" * 300, "".join(chr(ord("a") + i % 26) for i in range(1_990))
    assert query_terms(f"{short} Ménière {long_}") == ["ménière"]
    assert query_terms(f"{short} {long_}") == []
    assert query_terms(f"{'é' * 80} {'é' * 79}") == ["é" * 79]
    assert query_terms("x" * (MAX_TOKEN_BYTES - 1)) == ["x" * (MAX_TOKEN_BYTES - 1)]
    compiled: list[str] = []
    compile_ = re.compile
    _foldable()  # the one class of every foldable letter, compiled once

    def recording(pattern: str, flags: int = 0) -> re.Pattern[str]:
        compiled.append(pattern)
        return compile_(pattern, flags)

    monkeypatch.setattr(re, "compile", recording)
    text = "Crème brûlée à la française, " * 40
    assert excerpt_for(text, query_terms(f"{short} {long_}")).startswith("Crème brûlée")
    assert compiled == []


def test_function_words_never_anchor_an_excerpt() -> None:
    text = "the " * 200 + "A rare anomaly in the wake region. " + "the filler " * 100
    excerpt = excerpt_for(text, query_terms("the anomaly"))
    assert "anomaly" in excerpt


def test_a_passage_s_excerpt_does_not_depend_on_the_strategy(
    tmp_path: Path, shared_minilm: SentenceTransformerEmbedder
) -> None:
    # Long texts (excerpts are cut) where the text's own rarest term and the index's
    # rarest term differ: "delta" is in every document, "peat" in two, and the target
    # names the delta once, early, and the peat three times, late.
    filler = "The survey logged water depth and salinity at each station. " * 8
    docs = [
        Document(id="t", title="Core T", text=f"delta {filler} peat peat peat layers."),
        Document(id="u", title="Core U", text=f"{filler} delta and peat {filler}"),
        *(
            Document(id=f"o{i}", title=f"Core {i}", text=f"{filler} delta mud {i} {filler}")
            for i in range(6)
        ),
    ]
    switchable = SwitchableEmbedder(shared_minilm)
    with SearchEngine(tmp_path, embedder_factory=lambda spec: switchable) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c"))
        corpus.add(docs)
        hybrid = corpus.search("peat delta", top_k=8)
        switchable.down = True  # answered from keywords alone
        keyword = corpus.search("peat delta", top_k=8)
    assert any(h.ranks.dense is not None for h in hybrid)
    assert all(h.ranks.dense is None for h in keyword)
    by_id = {h.source_id: h.excerpt for h in keyword}
    assert {h.source_id: h.excerpt for h in hybrid if h.source_id in by_id} == by_id
    assert len(by_id) == len(docs)  # every document holds "delta": all compared
    assert "peat" in by_id["t"] and not by_id["t"].startswith("delta")
