"""Shared dense fixtures: the real all-MiniLM-L6-v2, loaded once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from dense.local import SentenceTransformerEmbedder


@pytest.fixture(scope="session")
def minilm_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's ONNX export lives (never ``~/.cache``)."""
    return tmp_path_factory.mktemp("tandem-cache")


@pytest.fixture(scope="session")
def minilm(minilm_cache_dir: Path) -> SentenceTransformerEmbedder:
    """The default embedder (offline packaged model), warmed up: torch + ONNX query path."""
    embedder = SentenceTransformerEmbedder(cache_dir=minilm_cache_dir)
    embedder.warm_up()
    return embedder
