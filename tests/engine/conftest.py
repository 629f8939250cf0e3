"""Engine fixtures: engines on temp directories with a cheap deterministic embedder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import SearchEngine
from tests.support.fakes import HashEmbedder, SwitchableEmbedder
from tests.support.natural_standin import ChatStandIn


@pytest.fixture
def hash_embedder() -> SwitchableEmbedder:
    return SwitchableEmbedder(HashEmbedder())


@pytest.fixture
def fast_engine(tmp_path: Path, hash_embedder: SwitchableEmbedder) -> Iterator[SearchEngine]:
    """An engine whose corpora embed with ``hash_embedder`` (switchable faults)."""
    with SearchEngine(tmp_path / "fast", embedder_factory=lambda spec: hash_embedder) as eng:
        yield eng


@pytest.fixture
def chat_standin() -> Iterator[ChatStandIn]:
    """The Ollama stand-in with a chat model (``tests.support.natural_standin``), running."""
    standin = ChatStandIn()
    standin.start()
    try:
        yield standin
    finally:
        standin.stop()
