"""The corpus's ``DimensionGuard`` is an ``Embedder`` too: it passes the contract suite,
and a provider whose dimension changed fails the one documented way."""

from __future__ import annotations

import pytest

from dense import Embedder
from engine.dimension_guard import DimensionGuard
from tests.support.embedder_contract import EmbedderContract
from tests.support.fakes import HashEmbedder


class TestDimensionGuardContract(EmbedderContract):
    @pytest.fixture
    def embedder(self) -> Embedder:
        return DimensionGuard(HashEmbedder(dimension=16), lambda: 16)

    @pytest.fixture
    def broken_embedder(self) -> Embedder:
        # the corpus holds 24-dimensional vectors; the provider now makes 16
        return DimensionGuard(HashEmbedder(dimension=16), lambda: 24)
