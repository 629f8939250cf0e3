"""One vector for a long document: the mean of its passages' vectors.

A sentence model reads a bounded number of word pieces (all-MiniLM-L6-v2: 256) and
silently drops the rest, so the tail of a long abstract is invisible to the vector arm.
``PassageMeanEmbedder`` splits each document into overlapping windows of words (the
title, when there is one, heads every window), embeds every window in one call to the
wrapped embedder, and keeps, per document, the L2-normalised mean of its windows'
vectors: still one vector per document, so the vector index, its memory and the query
path are untouched; only ingest pays, in proportion to the extra windows.

By default windows are counted in whitespace-separated words, so the same split works
for every provider (a local model or Ollama). ``max_words`` should leave the model room:
English prose runs ~1.3 word pieces per word, so 160 words fit in 256 pieces with a
margin; a window the model still truncates loses a few words at its end, which the next
window (``stride_words`` later) repeats. A model whose tokenizer is at hand can cut
windows in its own word pieces instead (``PieceSplitter``): each window then fills the
model's input exactly (title included), one every half window, and nothing is truncated.

Queries are not split: ``embed_query`` is the wrapped embedder's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from dense.contracts import Embedder, embed_query, provider_rows
from dense.wrapped import WrappedEmbedder

Vectors = npt.NDArray[np.float32]

MAX_WINDOWS_PER_TEXT = 64
"""A document longer than this many windows keeps its first ``MAX_WINDOWS_PER_TEXT``
(its first 5,200 words at the defaults, 160-word windows 80 apart; 63 strides plus one
window in general): an outsized text must not cost unbounded model time."""

DEFAULT_MAX_WORDS = 160
DEFAULT_STRIDE_WORDS = 80
"""Word windows' default shape (also what a tokenizer without offsets falls back to)."""

MAX_TOKENIZED_CHARS = 200_000
"""``PieceSplitter`` tokenizes at most this much of a body (64 windows of 256 pieces
cover ~40,000 characters of prose): the tokenizer's cost stays bounded too."""

Splitter = Callable[[str], list[str]]
"""A document's text (title, newline, body) -> the texts to embed for it."""

Offsets = Sequence[tuple[int, int]]
"""Character ``(start, end)`` of each word piece of a text, in order."""


def split_passages(text: str, *, max_words: int, stride_words: int, title: str = "") -> list[str]:
    """``text`` as overlapping windows of at most ``max_words`` words, each starting
    ``stride_words`` after the previous one, ``title`` (if any) prefixed to each.

    A text of at most ``max_words`` words is one window, the text itself (unchanged, so
    a short document's vector is exactly what the plain embedder gives). Every word of
    the text is in at least one window (up to ``MAX_WINDOWS_PER_TEXT`` windows).
    """
    if max_words < 1 or not 1 <= stride_words <= max_words:
        raise ValueError(
            f"need max_words >= 1 and 1 <= stride_words <= max_words, "
            f"got {max_words} and {stride_words}"
        )
    words = text.split()
    head = title.strip()
    whole = f"{head}\n{text}".strip() if head else text
    if len(words) <= max_words:
        return [whole]
    windows: list[str] = []
    start = 0
    while len(windows) < MAX_WINDOWS_PER_TEXT:
        body = " ".join(words[start : start + max_words])
        windows.append(f"{head}\n{body}" if head else body)
        if start + max_words >= len(words):
            break
        start += stride_words
    return windows


def split_by_pieces(
    body: str, offsets: Offsets, *, max_pieces: int, stride: int, title: str = ""
) -> list[str]:
    """``body`` as windows of at most ``max_pieces`` word pieces (``offsets``: each
    piece's characters in ``body``), one every ``stride`` pieces, ``title`` prefixed.

    A body of at most ``max_pieces`` pieces is one window, the title and body joined as
    ``split_passages`` joins them. Every piece is in at least one window (up to
    ``MAX_WINDOWS_PER_TEXT`` windows); a window is the body's own characters from its
    first piece to its last, so nothing is re-spelled.
    """
    if max_pieces < 1 or not 1 <= stride <= max_pieces:
        raise ValueError(
            f"need max_pieces >= 1 and 1 <= stride <= max_pieces, got {max_pieces} and {stride}"
        )
    head = title.strip()
    if len(offsets) <= max_pieces:
        return [f"{head}\n{body}".strip() if head else body]
    windows: list[str] = []
    start = 0
    while len(windows) < MAX_WINDOWS_PER_TEXT:
        end = min(start + max_pieces, len(offsets))
        part = body[offsets[start][0] : offsets[end - 1][1]]
        windows.append(f"{head}\n{part}" if head else part)
        if end >= len(offsets):
            break
        start += stride
    return windows


class PieceSplitter:
    """A ``Splitter`` that cuts windows in a model's own word pieces.

    ``load`` returns the model's (fast) tokenizer and its input length in pieces; it is
    called on first use, so building a splitter never loads a model. Each window holds
    the title's pieces plus as many of the body's as the input has room for (special
    tokens and a margin of 1/32 excluded), and starts half a window after the previous
    one. A title taking
    more than a quarter of the input is split with the body instead. A tokenizer that
    cannot report character offsets (not a "fast" one) gets word windows instead.
    """

    def __init__(self, load: Callable[[], tuple[Any, int]]) -> None:
        self._load = load
        self._loaded: tuple[Any, int] | None = None
        self._words = _WordSplitter(DEFAULT_MAX_WORDS, DEFAULT_STRIDE_WORDS)

    def __call__(self, text: str) -> list[str]:
        if self._loaded is None:
            self._loaded = self._load()
        tokenizer, limit = self._loaded
        if not getattr(tokenizer, "is_fast", False):
            return self._words(text)
        room = int(limit) - int(tokenizer.num_special_tokens_to_add(pair=False))
        title, newline, body = text.partition("\n")
        head = len(self._offsets(tokenizer, f"{title}\n")) if newline and title.strip() else 0
        if not newline or head > room // 4:
            title, body, head = "", text, 0
        body = body[:MAX_TOKENIZED_CHARS]
        offsets = self._offsets(tokenizer, body)
        # A window re-tokenized alone may split its first word differently (it can start
        # inside a word): a few pieces of margin keep it within the input.
        max_pieces = max(1, room - head - max(2, room // 32))
        if len(offsets) <= max_pieces:
            return [text]
        return split_by_pieces(
            body, offsets, max_pieces=max_pieces, stride=max(1, max_pieces // 2), title=title
        )

    @staticmethod
    def _offsets(tokenizer: Any, text: str) -> list[tuple[int, int]]:
        encoded = tokenizer(
            text, add_special_tokens=False, return_offsets_mapping=True, verbose=False
        )
        return [(int(a), int(b)) for a, b in encoded["offset_mapping"]]


class _WordSplitter:
    """Word windows (``split_passages``) with the title rule ``PassageMeanEmbedder``
    documents."""

    def __init__(self, max_words: int, stride_words: int) -> None:
        split_passages("", max_words=max_words, stride_words=stride_words)  # validates
        self.max_words = max_words
        self.stride_words = stride_words

    def __call__(self, text: str) -> list[str]:
        title, newline, body = text.partition("\n")
        if not newline or len(title.split()) > self.max_words // 4:
            title, body = "", text  # no heading line: the whole text is split
        windows = split_passages(
            body, max_words=self.max_words, stride_words=self.stride_words, title=title
        )
        return [text] if len(windows) == 1 else windows


class PassageMeanEmbedder(WrappedEmbedder):
    """An ``Embedder`` whose document vectors are means of passage vectors.

    ``embed(texts)`` takes document texts as the engine builds them (title, newline,
    body). A short first line (at most ``max_words // 4`` words: a title or a heading)
    heads every window of the rest; a text without one is split whole. ``splitter``
    replaces the word windows (``PieceSplitter``: windows in the model's word pieces).
    """

    def __init__(
        self,
        inner: Embedder,
        *,
        max_words: int = DEFAULT_MAX_WORDS,
        stride_words: int = DEFAULT_STRIDE_WORDS,
        splitter: Splitter | None = None,
    ) -> None:
        words = _WordSplitter(max_words, stride_words)
        super().__init__(inner)
        self._split: Splitter = splitter if splitter is not None else words

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit row per document: the normalised mean of its windows' vectors."""
        if isinstance(texts, str):
            raise ValueError("embed takes a sequence of strings")
        windows: list[str] = []
        owners: list[int] = []
        for i, text in enumerate(texts):
            parts = self.windows(text)
            windows.extend(parts)
            owners.extend([i] * len(parts))
        if len(windows) == len(texts):  # nothing was split: the plain embedder's rows
            return self._inner.embed(texts)
        # Checked before the means (the corpus's guard sees only them): a row short or a
        # 1-D answer failed the whole add with a ValueError instead of storing degraded.
        rows = provider_rows(self._inner.embed(windows), len(windows), f"{len(windows)} windows")
        sums = np.zeros((len(texts), rows.shape[1]), dtype=np.float64)
        np.add.at(sums, np.asarray(owners, dtype=np.int64), rows)
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        norms[norms == 0] = 1.0  # opposite windows cancelling out: keep a zero row visible
        return np.ascontiguousarray(sums / norms, dtype=np.float32)

    def embed_query(
        self, text: str, *, before_model: Callable[[], object] | None = None
    ) -> Vectors:
        """A query is embedded whole, by the wrapped embedder."""
        return embed_query(self._inner, text, before_model=before_model)

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if callable(close):
            close()

    def windows(self, text: str) -> list[str]:
        """The texts ``embed`` sends to the model for one document."""
        return self._split(text)
