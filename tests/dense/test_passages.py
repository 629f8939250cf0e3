"""``dense.passages``: the word-window split (hypothesis) and the mean-of-passages
embedder, against a fake that truncates like a sentence model and against MiniLM."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dense import (
    PassageMeanEmbedder,
    PieceSplitter,
    SentenceTransformerEmbedder,
    split_by_pieces,
    split_passages,
)
from dense.passages import MAX_WINDOWS_PER_TEXT
from tests.support.fakes import FakeEmbedder, HashEmbedder, RecordingEmbedder, word_directions

words = st.lists(st.from_regex(r"[a-z]{1,6}", fullmatch=True), max_size=400)
shapes = st.integers(1, 40).flatmap(lambda m: st.tuples(st.just(m), st.integers(1, m)))


@settings(max_examples=200, deadline=None)
@given(text_words=words, shape=shapes, title=st.sampled_from(["", "A title"]))
def test_windows_cover_every_word_in_order_and_respect_the_cap(
    text_words: list[str], shape: tuple[int, int], title: str
) -> None:
    max_words, stride = shape
    text = " ".join(text_words)
    windows = split_passages(text, max_words=max_words, stride_words=stride, title=title)
    if len(text_words) <= max_words:
        assert windows == [f"{title}\n{text}".strip() if title else text]
        return
    bodies = [w.split("\n", 1)[1] if title else w for w in windows]
    if title:
        assert all(w.startswith(f"{title}\n") for w in windows)
    assert all(1 <= len(b.split()) <= max_words for b in bodies)
    for i, body in enumerate(bodies):  # window i starts i strides in
        assert body.split() == text_words[i * stride : i * stride + max_words]
    if len(windows) < MAX_WINDOWS_PER_TEXT:
        assert bodies[-1].split()[-1] == text_words[-1]  # the tail is in the last window
    assert len(windows) <= MAX_WINDOWS_PER_TEXT


def test_bad_window_shapes_are_refused() -> None:
    for max_words, stride in ((0, 1), (10, 0), (10, 11)):
        with pytest.raises(ValueError, match="stride_words"):
            split_passages("a b c", max_words=max_words, stride_words=stride)
        with pytest.raises(ValueError):
            PassageMeanEmbedder(HashEmbedder(), max_words=max_words, stride_words=stride)


def _truncating(limit: int = 20) -> FakeEmbedder:
    """Reads only the first ``limit`` words, as a sentence model reads 256 word pieces."""
    return FakeEmbedder(
        64,
        "truncating",
        vectors=lambda text, dim: word_directions(" ".join(text.split()[:limit]), dim),
    )


def _long_document(head: str, tail: str, n: int = 30) -> str:
    return "Title words\n" + " ".join([head] * n + [tail] * n)


def test_short_texts_get_exactly_the_plain_vectors() -> None:
    inner = HashEmbedder()
    wrapped = PassageMeanEmbedder(inner, max_words=50, stride_words=25)
    texts = ["A title\nsome body words", "no title at all", ""]
    assert np.array_equal(wrapped.embed(texts), inner.embed(texts))
    assert inner.calls == 2  # one call each, nothing split


def test_a_long_text_is_the_normalised_mean_of_its_windows() -> None:
    inner = _truncating()
    wrapped = PassageMeanEmbedder(inner, max_words=20, stride_words=10)
    text = _long_document("alpha", "omega")
    windows = split_passages(
        text.split("\n", 1)[1], max_words=20, stride_words=10, title="Title words"
    )
    assert len(windows) == 5
    expected = inner.embed(windows).sum(axis=0)
    expected /= np.linalg.norm(expected)
    got = wrapped.embed(["short one", text])
    assert got.shape == (2, 64) and got.dtype == np.float32
    np.testing.assert_allclose(got[1], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(got[0], inner.embed(["short one"])[0], rtol=1e-6)


def test_the_tail_becomes_visible_to_the_vector() -> None:
    inner = _truncating()
    wrapped = PassageMeanEmbedder(inner, max_words=20, stride_words=10)
    doc = _long_document("alpha", "omega")
    query = inner.embed(["omega omega omega"])[0]
    truncated = float(inner.embed([doc])[0] @ query)
    whole = float(wrapped.embed([doc])[0] @ query)
    assert truncated < 0.2 < whole  # the first 20 words hold no "omega"


def test_a_first_line_too_long_for_a_title_is_not_repeated() -> None:
    inner = HashEmbedder()
    inner_calls: list[list[str]] = []
    # a first line of more than 8 // 4 words is body text, not a heading
    wrapped = PassageMeanEmbedder(inner, max_words=8, stride_words=4)
    original = inner.embed

    def spy(texts: list[str]) -> np.ndarray:
        inner_calls.append(list(texts))
        return original(texts)

    inner.embed = spy  # type: ignore[method-assign]
    wrapped.embed(["one two three\nfour five six seven eight nine ten eleven twelve"])
    windows = inner_calls[-1]
    assert windows[0].split() == ["one", "two", "three", "four", "five", "six", "seven", "eight"]
    assert all("\n" not in w for w in windows)


def test_queries_are_embedded_whole_by_the_inner_model() -> None:
    inner = _truncating(limit=1000)
    wrapped = PassageMeanEmbedder(inner, max_words=5, stride_words=5)
    query = " ".join(["word"] * 40)
    hook_calls: list[int] = []
    row = wrapped.embed_query(query, before_model=lambda: hook_calls.append(1))
    np.testing.assert_array_equal(row, inner.embed([query])[0])
    assert hook_calls == [1]
    assert (wrapped.name, wrapped.dimension) == (inner.name, inner.dimension)


def test_minilm_sees_a_long_document_past_its_256_word_pieces(
    shared_minilm: SentenceTransformerEmbedder,
) -> None:
    """With the real model: a document that starts on cooking and ends on astronomy.
    Truncated, MiniLM never reads the astronomy; as the mean of its passages it does."""
    cooking = (
        "Simmer the onions slowly in butter until golden, then add garlic, thyme and a "
        "splash of white wine, and let the sauce reduce before seasoning with salt. "
    )
    astronomy = (
        "The telescope recorded faint galaxies at high redshift, and the spectra showed "
        "hydrogen emission lines from the earliest stars in the young universe. "
    )
    doc = "Notes\n" + cooking * 12 + astronomy * 12
    wrapped = PassageMeanEmbedder(shared_minilm)
    query = shared_minilm.embed(["spectra of distant galaxies seen by a telescope"])[0]
    truncated = float(shared_minilm.embed([doc])[0] @ query)
    whole = float(wrapped.embed([doc])[0] @ query)
    assert whole > truncated + 0.1, (truncated, whole)


# -- windows in the model's own word pieces ------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text("abc xyz", min_size=1, max_size=6), min_size=0, max_size=60),
    st.integers(1, 12),
    st.integers(1, 12),
)
def test_piece_windows_cover_every_piece_in_order(
    words: list[str], max_pieces: int, stride: int
) -> None:
    stride = min(stride, max_pieces)
    body = " ".join(words)
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\S+", body)]
    windows = split_by_pieces(body, offsets, max_pieces=max_pieces, stride=stride, title="T")
    if len(offsets) <= max_pieces:
        assert windows == [f"T\n{body}".strip()]
        return
    assert len(windows) <= MAX_WINDOWS_PER_TEXT
    covered = set()
    for i, window in enumerate(windows):
        head, _, part = window.partition("\n")
        assert head == "T"
        start = i * stride
        chunk = offsets[start : start + max_pieces]
        assert part == body[chunk[0][0] : chunk[-1][1]]  # the body's own characters
        covered.update(range(start, start + len(chunk)))
    if len(windows) < MAX_WINDOWS_PER_TEXT:
        assert covered == set(range(len(offsets)))


def test_piece_windows_refuse_bad_shapes() -> None:
    for max_pieces, stride in ((0, 1), (4, 0), (4, 5)):
        with pytest.raises(ValueError):
            split_by_pieces("a b", [(0, 1), (2, 3)], max_pieces=max_pieces, stride=stride)


def test_minilm_piece_windows_fill_the_model_input_and_reach_the_end(
    shared_minilm: SentenceTransformerEmbedder,
) -> None:
    splitter = shared_minilm.piece_splitter()
    body = " ".join(f"photosynthesis{i} converts light into chemical energy" for i in range(200))
    windows = splitter("A short title\n" + body)
    model = shared_minilm._torch()
    limit = int(model.max_seq_length)
    lengths = [len(model.tokenizer(w)["input_ids"]) for w in windows]
    assert len(windows) > 2
    assert max(lengths) <= limit  # nothing the model would truncate
    assert max(lengths) >= limit - 16  # and each full window uses the room it has
    assert all(w.startswith("A short title\n") for w in windows)
    assert windows[-1].endswith("chemical energy")  # the tail is in the last window
    assert splitter("A short title\nA short body.") == ["A short title\nA short body."]


def test_a_tokenizer_without_offsets_gets_word_windows() -> None:
    class SlowTokenizer:
        is_fast = False

    splitter = PieceSplitter(lambda: (SlowTokenizer(), 256))
    text = "Title\n" + " ".join(f"w{i}" for i in range(400))
    assert splitter(text) == PassageMeanEmbedder(HashEmbedder()).windows(text)


def test_the_piece_splitter_is_what_the_embedder_sends_to_the_model() -> None:
    inner = RecordingEmbedder()
    splitter = PieceSplitter(lambda: (_WhitespaceTokenizer(), 10))
    wrapped = PassageMeanEmbedder(inner, splitter=splitter)
    text = "Head\n" + " ".join(f"w{i}" for i in range(30))
    wrapped.embed([text])
    assert list(inner.embedded) == splitter(text)
    assert all(len(w.split()) <= 10 - 2 for w in inner.embedded)


class _WhitespaceTokenizer:
    """A fast-tokenizer stand-in: one piece per whitespace-separated word, two specials."""

    is_fast = True

    def num_special_tokens_to_add(self, pair: bool = False) -> int:
        return 2

    def __call__(self, text: str, **_: object) -> dict[str, list[tuple[int, int]]]:
        return {"offset_mapping": [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]}
