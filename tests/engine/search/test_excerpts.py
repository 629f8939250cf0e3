"""Engine-side excerpts anchor on the query term that is rarest in the text."""

from __future__ import annotations

from engine.search.excerpts import excerpt_for, query_terms
from sparse import MAX_EXCERPT_LENGTH


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


def test_function_words_never_anchor_an_excerpt() -> None:
    text = "the " * 200 + "A rare anomaly in the wake region. " + "the filler " * 100
    excerpt = excerpt_for(text, query_terms("the anomaly"))
    assert "anomaly" in excerpt
