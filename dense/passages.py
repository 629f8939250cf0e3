"""One vector for a long document: the mean of its passages' vectors.

A sentence model reads a bounded number of word pieces (all-MiniLM-L6-v2: 256) and
silently drops the rest, so the tail of a long abstract is invisible to the vector arm.
``PassageMeanEmbedder`` splits each document into overlapping windows of words (the
title, when there is one, heads every window), embeds every window in one call to the
wrapped embedder, and keeps, per document, the L2-normalised mean of its windows'
vectors: still one vector per document, so the vector index, its memory and the query
path are untouched; only ingest pays, in proportion to the extra windows.

Windows are counted in whitespace-separated words, not in the model's word pieces, so
the same split works for every provider (a local model or Ollama). ``max_words`` should
leave the model room: English prose runs ~1.3 word pieces per word, so 160 words fit in
256 pieces with a margin; a window the model still truncates loses a few words at its
end, which the next window (``stride_words`` later) repeats.

Queries are not split: ``embed_query`` is the wrapped embedder's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from dense.contracts import Embedder, embed_query
from dense.wrapped import WrappedEmbedder

Vectors = npt.NDArray[np.float32]

MAX_WINDOWS_PER_TEXT = 64
"""A document longer than this many windows keeps its first ``MAX_WINDOWS_PER_TEXT``
(10,000 words at the defaults): an outsized text must not cost unbounded model time."""


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


class PassageMeanEmbedder(WrappedEmbedder):
    """An ``Embedder`` whose document vectors are means of passage vectors.

    ``embed(texts)`` takes document texts as the engine builds them (title, newline,
    body). A short first line (at most ``max_words // 4`` words: a title or a heading)
    heads every window of the rest; a text without one is split whole.
    """

    def __init__(
        self,
        inner: Embedder,
        *,
        max_words: int = 160,
        stride_words: int = 80,
    ) -> None:
        split_passages("", max_words=max_words, stride_words=stride_words)  # validates
        super().__init__(inner)
        self._max_words = max_words
        self._stride_words = stride_words

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
        rows = np.asarray(self._inner.embed(windows), dtype=np.float32)
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
        title, newline, body = text.partition("\n")
        if not newline or len(title.split()) > self._max_words // 4:
            title, body = "", text  # no heading line: the whole text is split
        windows = split_passages(
            body, max_words=self._max_words, stride_words=self._stride_words, title=title
        )
        return [text] if len(windows) == 1 else windows
