"""Synthetic corpora for the scale runs: Zipfian text and random unit vectors, fixed seed.

The vocabulary is made of pronounceable pseudo-words (so tokenizers and stemmers behave
as on text), drawn with Zipf's law (exponent ``ZIPF_S``); document lengths are Poisson
around ``MEAN_DOC_TOKENS``. Queries take 2-4 words from the middle of the frequency
range, where keyword search does real work (neither stop-word-like nor unseen).
Everything derives from one ``numpy`` generator seeded by the caller, so two processes
building the same (size, seed) corpus get identical data.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bench.dataset import BenchDocument

VOCAB_SIZE = 50_000
ZIPF_S = 1.07
MEAN_DOC_TOKENS = 48
TITLE_TOKENS = 6
DIMENSION = 384
CHUNK = 50_000
_ONSETS = ("b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ou")


@dataclass(frozen=True, slots=True)
class SyntheticCorpus:
    """Size, seed and the pieces derived from them (vectors are generated on demand)."""

    n_docs: int
    seed: int
    vocabulary: tuple[str, ...]

    def documents(self) -> list[BenchDocument]:
        return list(iter_documents(self))


def vocabulary(seed: int, size: int = VOCAB_SIZE) -> tuple[str, ...]:
    """``size`` distinct pseudo-words, most frequent first."""
    rng = np.random.default_rng(seed)
    words: dict[str, None] = {}
    while len(words) < size:
        n_syllables = int(rng.integers(2, 5))
        word = "".join(
            _ONSETS[int(rng.integers(len(_ONSETS)))] + _VOWELS[int(rng.integers(len(_VOWELS)))]
            for _ in range(n_syllables)
        )
        words.setdefault(word, None)
    return tuple(words)


def make_corpus(n_docs: int, seed: int) -> SyntheticCorpus:
    if n_docs < 1:
        raise ValueError(f"n_docs must be >= 1, got {n_docs}")
    return SyntheticCorpus(n_docs=n_docs, seed=seed, vocabulary=vocabulary(seed))


def _zipf_probabilities(size: int) -> npt.NDArray[np.float64]:
    ranks = np.arange(1, size + 1, dtype=np.float64)
    weights: npt.NDArray[np.float64] = ranks**-ZIPF_S
    return np.asarray(weights / weights.sum(), dtype=np.float64)


def iter_documents(corpus: SyntheticCorpus) -> Iterator[BenchDocument]:
    """Documents ``s0 … s{n-1}``, generated in chunks to bound memory."""
    rng = np.random.default_rng(corpus.seed + 1)
    probs = _zipf_probabilities(len(corpus.vocabulary))
    vocab = np.asarray(corpus.vocabulary, dtype=object)
    for start in range(0, corpus.n_docs, CHUNK):
        count = min(CHUNK, corpus.n_docs - start)
        lengths = np.maximum(rng.poisson(MEAN_DOC_TOKENS, count), 4)
        tokens = vocab[
            rng.choice(len(vocab), size=int(lengths.sum()) + count * TITLE_TOKENS, p=probs)
        ]
        offset = 0
        for i in range(count):
            title = " ".join(tokens[offset : offset + TITLE_TOKENS])
            offset += TITLE_TOKENS
            body = " ".join(tokens[offset : offset + int(lengths[i])])
            offset += int(lengths[i])
            yield BenchDocument(doc_id=f"s{start + i}", title=title, text=body)


def vectors(corpus: SyntheticCorpus, dim: int = DIMENSION) -> npt.NDArray[np.float32]:
    """``(n_docs, dim)`` random unit vectors (Gaussian, normalised), float32."""
    rng = np.random.default_rng(corpus.seed + 2)
    out = np.empty((corpus.n_docs, dim), dtype=np.float32)
    for start in range(0, corpus.n_docs, CHUNK):
        stop = min(start + CHUNK, corpus.n_docs)
        block = rng.standard_normal((stop - start, dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[start:stop] = block
    return out


def queries(corpus: SyntheticCorpus, n_queries: int) -> list[str]:
    """``n_queries`` texts of 2-4 mid-frequency words (ranks 100 … 5 000)."""
    if n_queries < 1:
        raise ValueError(f"n_queries must be >= 1, got {n_queries}")
    rng = np.random.default_rng(corpus.seed + 3)
    hi = min(5_000, len(corpus.vocabulary))
    lo = min(100, hi - 1)
    out = []
    for _ in range(n_queries):
        picks = rng.integers(lo, hi, size=int(rng.integers(2, 5)))
        out.append(" ".join(corpus.vocabulary[int(p)] for p in picks))
    return out


def query_vectors(n_queries: int, seed: int, dim: int = DIMENSION) -> npt.NDArray[np.float32]:
    """Random unit query vectors for the dense arm measured alone (no embedding cost)."""
    rng = np.random.default_rng(seed + 4)
    block = rng.standard_normal((n_queries, dim), dtype=np.float32)
    block /= np.linalg.norm(block, axis=1, keepdims=True)
    return block
