"""bm25s as its README shows it: ``bm25s.tokenize(..., stopwords="en")`` (with a Snowball
stemmer when PyStemmer is installed), ``BM25().index``, ``retrieve(..., k)``."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from bench.dataset import BenchDocument
from bench.encoder import Vectors
from bench.systems.base import SystemContext, SystemName
from bench.timing import dir_size_bytes


def _stemmer() -> Any:
    """PyStemmer's English Snowball stemmer when installed (bm25s's recommended setup)."""
    try:
        stemmer_module = importlib.import_module("Stemmer")
    except ImportError:
        return None
    return stemmer_module.Stemmer("english")


class Bm25sSystem:
    name = SystemName.BM25S
    uses_vectors = False

    def __init__(self, ctx: SystemContext) -> None:
        self._path = ctx.workdir / "bm25s"
        self._retriever: Any = None
        self._stem: Any = None
        self._ids: list[str] = []

    def prepare(self) -> None:
        import bm25s  # noqa: F401

        self._stem = _stemmer()

    def index(self, documents: Sequence[BenchDocument], vectors: Vectors | None) -> None:
        import bm25s

        self._stem = _stemmer()
        self._ids = [doc.doc_id for doc in documents]
        tokens = bm25s.tokenize(
            [doc.full_text for doc in documents],
            stopwords="en",
            stemmer=self._stem,
            show_progress=False,
        )
        self._retriever = bm25s.BM25()
        self._retriever.index(tokens, show_progress=False)
        self._retriever.save(str(self._path))

    def search(self, query: str, k: int) -> list[str]:
        import bm25s

        if self._retriever is None:
            raise RuntimeError("search before index")
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=self._stem, show_progress=False)
        if not tokens.vocab:  # only stopwords: nothing to score
            return []
        rows, scores = self._retriever.retrieve(
            tokens, k=min(k, len(self._ids)), show_progress=False, n_threads=1
        )
        return [
            self._ids[int(row)]
            for row, score in zip(rows[0], scores[0], strict=True)
            if float(score) > 0.0
        ]

    def disk_bytes(self) -> int:
        return dir_size_bytes(self._path)

    def close(self) -> None:
        self._retriever = None
