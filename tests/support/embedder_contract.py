"""The contract-test suite every ``dense.Embedder`` inherits (see ``dense.contracts``).

Usage: subclass ``EmbedderContract`` in a ``test_*.py`` module (the class name must start
with ``Test``) and provide two fixtures:

- ``embedder``: a healthy instance;
- ``broken_embedder``: an instance whose provider cannot produce vectors (down,
  unreachable, refusing) — the suite checks it fails the one documented way.

The texts are short, so the real model passes the suite in well under a second.
"""

from __future__ import annotations

import numpy as np
import pytest

from dense import Embedder, EmbedderUnavailable, embed_query

TEXTS = ["reset your password", "delivery times for orders", "Ünïcödé straße 🌿"]


class EmbedderContract:
    def test_is_an_embedder(self, embedder: Embedder) -> None:
        assert isinstance(embedder, Embedder)
        assert isinstance(embedder.name, str) and embedder.name

    def test_vectors_have_the_documented_shape_type_and_norm(self, embedder: Embedder) -> None:
        vectors = embedder.embed(TEXTS)
        assert vectors.shape == (len(TEXTS), embedder.dimension)
        assert vectors.dtype == np.float32
        assert np.isfinite(vectors).all()
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)

    def test_empty_input_gives_zero_rows(self, embedder: Embedder) -> None:
        empty = embedder.embed([])
        assert empty.shape == (0, embedder.dimension)

    def test_dimension_is_stable_and_positive(self, embedder: Embedder) -> None:
        first = embedder.dimension
        embedder.embed(TEXTS[:1])
        assert isinstance(first, int) and first > 0 and embedder.dimension == first

    def test_rows_follow_input_order_and_are_deterministic(self, embedder: Embedder) -> None:
        together = embedder.embed(TEXTS)
        alone = np.vstack([embedder.embed([text]) for text in TEXTS])
        np.testing.assert_allclose(together, alone, atol=1e-4)
        reversed_rows = embedder.embed(list(reversed(TEXTS)))
        np.testing.assert_allclose(reversed_rows[::-1], together, atol=1e-4)

    def test_different_texts_get_different_vectors(self, embedder: Embedder) -> None:
        a, b = embedder.embed(TEXTS[:2])
        assert float(a @ b) < 0.999

    def test_a_healthy_embedder_says_so(self, embedder: Embedder) -> None:
        assert embedder.is_available() is True

    def test_query_path_calls_the_hook_once_and_matches_documents(self, embedder: Embedder) -> None:
        calls: list[int] = []
        row = embed_query(embedder, TEXTS[0], before_model=lambda: calls.append(1))
        assert calls == [1]
        assert row.shape == (embedder.dimension,) and row.dtype == np.float32
        # The query path may run another runtime (ONNX): same vector up to rounding.
        assert float(row @ embedder.embed([TEXTS[0]])[0]) > 0.999

    def test_a_broken_provider_fails_only_the_documented_way(
        self, broken_embedder: Embedder
    ) -> None:
        assert broken_embedder.is_available() in (True, False)  # answers, never raises
        with pytest.raises(EmbedderUnavailable):
            broken_embedder.embed(TEXTS)
