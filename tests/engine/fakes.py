"""Test doubles for the engine: deterministic embedders that can be switched off.

``HashEmbedder`` maps each word to a hashlib-derived random direction and sums them, so
texts sharing words are close — cheap, deterministic across processes (no ``hash()``).
``SwitchableEmbedder`` wraps any embedder and injects faults: down (``is_available`` is
False), or failing (``embed`` raises ``EmbedderUnavailable``) — the two ways a provider dies.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dense import Embedder, EmbedderUnavailable

_WORD = re.compile(r"\w+")


class HashEmbedder:
    def __init__(self, dimension: int = 64, name: str = "hash-embedder") -> None:
        self._dimension = dimension
        self._name = name
        self.calls = 0
        self.texts_embedded = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._dimension

    def is_available(self) -> bool:
        return True

    def _word_vector(self, word: str) -> npt.NDArray[np.float32]:
        seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self._dimension).astype(np.float32)

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls += 1
        self.texts_embedded += len(texts)
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in _WORD.findall(text.lower())[:512]:
                out[i] += self._word_vector(word)
            if not out[i].any():
                out[i, 0] = 1.0
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


class SwitchableEmbedder:
    """Wraps an embedder; ``down`` makes it unavailable, ``failing`` makes ``embed`` raise."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.down = False
        self.failing = False
        self.embed_calls = 0
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def is_available(self) -> bool:
        return not self.down

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        with self._lock:
            self.embed_calls += 1
        if self.down or self.failing:
            raise EmbedderUnavailable("injected fault")
        return self.inner.embed(texts)
