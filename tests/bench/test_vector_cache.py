"""Corpus vectors are computed once per (model, corpus) and reused from disk."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.dataset import load_beir
from bench.vector_cache import VectorCache, cache_key
from tests.bench.tiny_beir import write_beir


class CountingEncoder:
    """Deterministic stand-in (hashlib), counting how many texts it encoded."""

    model = "fake-model"

    def __init__(self) -> None:
        self.encoded = 0

    def encode(self, texts: Sequence[str], progress: bool = False) -> npt.NDArray[np.float32]:
        self.encoded += len(texts)
        rows = [
            np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8)[:8] for t in texts
        ]
        out = np.asarray(rows, dtype=np.float32) + 1.0
        return np.asarray(out / np.linalg.norm(out, axis=1, keepdims=True), dtype=np.float32)


def test_second_call_reads_the_cache(tmp_path: Path) -> None:
    data = load_beir(write_beir(tmp_path / "b"))
    cache = VectorCache(tmp_path / "cache")
    enc = CountingEncoder()
    first, from_cache = cache.get_or_compute(enc, data, progress=False)  # type: ignore[arg-type]
    assert not from_cache and enc.encoded == len(data.documents)
    second, from_cache = cache.get_or_compute(enc, data, progress=False)  # type: ignore[arg-type]
    assert from_cache and enc.encoded == len(data.documents)
    np.testing.assert_array_equal(first, second)
    assert second.dtype == np.float32 and second.shape == (len(data.documents), 8)
    assert cache.path_for("fake-model", data).with_suffix(".json").is_file()


def test_key_depends_on_model_and_corpus(tmp_path: Path) -> None:
    a = load_beir(write_beir(tmp_path / "a"))
    b = load_beir(write_beir(tmp_path / "b", gzip_corpus=True))
    assert cache_key("m1", a) != cache_key("m2", a)
    assert cache_key("m1", a) != cache_key("m1", b)
    assert cache_key("m1", a) != cache_key("m1", a.head(3))


def test_wrong_row_count_is_ignored(tmp_path: Path) -> None:
    data = load_beir(write_beir(tmp_path / "b"))
    cache = VectorCache(tmp_path / "cache")
    path = cache.path_for("fake-model", data)
    path.parent.mkdir(parents=True)
    np.save(path, np.zeros((2, 8), dtype=np.float32))
    assert cache.load("fake-model", data) is None
