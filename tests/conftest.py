"""Session-wide fixtures shared by every test package."""

from __future__ import annotations

from pathlib import Path

import pytest

from dense.local import SentenceTransformerEmbedder


@pytest.fixture(scope="session")
def shared_minilm(tmp_path_factory: pytest.TempPathFactory) -> SentenceTransformerEmbedder:
    """The real default model (offline package), loaded once for the whole session."""
    cache: Path = tmp_path_factory.mktemp("tandem-onnx-cache")
    embedder = SentenceTransformerEmbedder(cache_dir=cache)
    embedder.warm_up()
    return embedder
