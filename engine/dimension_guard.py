"""A corpus's view of its embedder: vectors must match the dimension the corpus holds.

A provider can change under a corpus between runs (an Ollama model re-pulled under the
same name, a server swapped): a fresh embedder then learns the new dimension as if it
were right, and its vectors would break the FAISS index. Through this guard a vector of
the wrong dimension is provider trouble like any other — ``EmbedderUnavailable`` — so a
document is stored degraded and a query answers from keyword search. Changing a
corpus's model on purpose is ``SearchEngine.switch_embedder``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from dense import Embedder, EmbedderUnavailable, embed_query
from dense.wrapped import WrappedEmbedder

logger = logging.getLogger(__name__)


class DimensionGuard(WrappedEmbedder):
    """Wraps a (shared) embedder; ``expected()`` is the corpus's dimension, None = any."""

    def __init__(self, inner: Embedder, expected: Callable[[], int | None]) -> None:
        super().__init__(inner)
        self._expected = expected
        self._reported: set[tuple[int, int]] = set()

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self._checked(self._inner.embed(texts))

    def embed_query(
        self, text: str, *, before_model: Callable[[], object] | None = None
    ) -> npt.NDArray[np.float32]:
        vector = embed_query(self._inner, text, before_model=before_model)
        row: npt.NDArray[np.float32] = self._checked(vector[None, :])[0]
        return row

    def _checked(self, vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        expected = self._expected()
        got = int(vectors.shape[1]) if vectors.ndim == 2 else -1
        if expected is not None and got != expected and len(vectors):
            if (expected, got) not in self._reported:  # once per mismatch, not per query
                self._reported.add((expected, got))
                logger.warning(
                    "embedder %s returned dimension %d, the corpus holds %d; treating it as "
                    "unavailable (use switch_embedder to change models)",
                    self._inner.name,
                    got,
                    expected,
                )
            raise EmbedderUnavailable(
                f"embedder returned dimension {got}; the corpus's vectors have {expected}"
            )
        return vectors
