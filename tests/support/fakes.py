"""Test doubles for the engine: one configurable fake embedder, and a fault-injecting wrapper.

``FakeEmbedder`` is deterministic across processes (hashlib, never ``hash()``) and is
configured in the ways tests need a provider to behave:

- how a text becomes a vector (``vectors``): ``word_directions`` (each word a random
  direction, summed, so texts sharing words are close), ``word_buckets`` (cheaper, and
  tolerates lone surrogates) or ``text_direction`` (the whole text one random direction);
- how it dies: ``down`` (``is_available()`` False and ``embed`` raises), ``failing``
  (``embed`` raises ``EmbedderUnavailable``), ``refuse_poison`` (``embed`` raises when any
  text holds ``POISON``), and ``delay_s``, a model-like pause a SIGKILL can land in;
- what it counts: ``calls``, ``texts_embedded``, ``availability_checks`` and, with
  ``record=True``, every text it embedded (``embedded``: proof nothing is embedded twice).

``HashEmbedder``, ``WordHashEmbedder`` and ``RecordingEmbedder`` are its presets.
``SwitchableEmbedder`` wraps any embedder, the real model included, to inject the
``down``/``failing`` faults.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from dense import Embedder, EmbedderUnavailable
from engine.config import EmbedderSpec

POISON = "zzpoisonzz"

Row = npt.NDArray[np.float32]
Vectorizer = Callable[[str, int], Row]
"""(text, dimension) -> an unnormalised vector; the fake normalises it."""

_WORD = re.compile(r"\w+")


def _gaussian(seed_text: str, dimension: int) -> Row:
    seed = int.from_bytes(hashlib.sha256(seed_text.encode()).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dimension).astype(np.float32)


def word_directions(text: str, dimension: int) -> Row:
    """The sum of the first 512 words' random directions (a word: ``\\w+``, lowercased)."""
    row = np.zeros(dimension, dtype=np.float32)
    for word in _WORD.findall(text.lower())[:512]:
        row += _gaussian(word, dimension)
    if not row.any():
        row[0] = 1.0
    return row


def word_buckets(text: str, dimension: int) -> Row:
    """The first 256 whitespace-split words hashed into two buckets each (any ``str``)."""
    row = np.zeros(dimension, dtype=np.float32)
    for word in text.lower().split()[:256]:
        digest = hashlib.blake2b(word.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        row[digest[0] % dimension] += 1.0
        row[digest[1] % dimension] += 0.5
    row[dimension - 1] += 0.01  # never all-zero
    return row


def text_direction(text: str, dimension: int) -> Row:
    """One random direction for the whole text: different texts are far apart."""
    return _gaussian(text, dimension)


class FakeEmbedder:
    """A deterministic ``dense.Embedder`` with switchable faults and call counters."""

    def __init__(
        self,
        dimension: int,
        name: str,
        *,
        vectors: Vectorizer,
        record: bool = False,
        delay_s: float = 0.0,
    ) -> None:
        self._dimension = dimension
        self._name = name
        self._vectors = vectors
        self._record = record
        self.delay_s = delay_s
        self.down = False  # is_available() answers False; embed() raises
        self.failing = False  # embed() raises EmbedderUnavailable
        self.refuse_poison = False  # embed() raises when any text holds POISON
        self.calls = 0
        self.texts_embedded = 0
        self.availability_checks = 0
        self.embedded: Counter[str] = Counter()  # filled only with record=True
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._dimension

    def is_available(self) -> bool:
        with self._lock:
            self.availability_checks += 1
        return not self.down

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.delay_s:
            time.sleep(self.delay_s)
        with self._lock:
            self.calls += 1
            if self.down or self.failing:
                raise EmbedderUnavailable("injected fault")
            if self.refuse_poison and any(POISON in t for t in texts):
                raise EmbedderUnavailable("injected fault (poison)")
            self.texts_embedded += len(texts)
            if self._record:
                self.embedded.update(texts)
        out = np.zeros((len(texts), self._dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self._vectors(text, self._dimension)
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out


class HashEmbedder(FakeEmbedder):
    """Word directions in 64 dimensions: close vectors for texts that share words."""

    def __init__(self, dimension: int = 64, name: str = "hash-embedder") -> None:
        super().__init__(dimension, name, vectors=word_directions)


class WordHashEmbedder(FakeEmbedder):
    """Word buckets in 32 dimensions: cheap, and takes any ``str`` (the reliability suite)."""

    def __init__(
        self, dimension: int = 32, name: str = "word-hash", *, delay_s: float = 0.0
    ) -> None:
        super().__init__(dimension, name, vectors=word_buckets, delay_s=delay_s)


class RecordingEmbedder(FakeEmbedder):
    """Whole-text directions in 16 dimensions, remembering every text it embedded."""

    def __init__(self, dimension: int = 16, name: str = "recording") -> None:
        super().__init__(dimension, name, vectors=text_direction, record=True)


def factory_for(embedder: FakeEmbedder) -> Callable[[EmbedderSpec], FakeEmbedder]:
    """An ``embedder_factory`` handing every spec the same fake (so tests can switch it)."""

    def build(spec: EmbedderSpec) -> FakeEmbedder:
        del spec
        return embedder

    return build


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


class SlowHealthEmbedder(RecordingEmbedder):
    """Its health check parks while ``park_health`` is set, until the test lets it go
    (an Ollama check takes up to 2 s): a search held in flight."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.park_health = False
        self.in_health = threading.Event()
        self.let_go = threading.Event()

    def is_available(self) -> bool:
        if self.park_health:
            self.in_health.set()
            self.let_go.wait(60.0)
        return super().is_available()
