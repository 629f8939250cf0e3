"""Every embedding provider passes the one ``Embedder`` contract suite
(``tests/support/embedder_contract.py``): the real model, Ollama through its stand-in
(never a real server), and the test fake."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from dense import Embedder, OllamaEmbedder, SentenceTransformerEmbedder
from tests.support.embedder_contract import EmbedderContract
from tests.support.fakes import HashEmbedder
from tests.support.ollama_standin import OllamaStandIn


def _closed_port() -> int:
    """A port nothing listens on (bound by the OS, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TestSentenceTransformerContract(EmbedderContract):
    @pytest.fixture
    def embedder(self, minilm: SentenceTransformerEmbedder) -> Embedder:
        return minilm

    @pytest.fixture
    def broken_embedder(self, tmp_path: Path) -> Embedder:
        return SentenceTransformerEmbedder(str(tmp_path / "no-such-model"), cache_dir=tmp_path)


class TestOllamaContract(EmbedderContract):
    @pytest.fixture
    def standin(self) -> Iterator[OllamaStandIn]:
        with OllamaStandIn() as standin:
            yield standin

    @pytest.fixture
    def embedder(self, standin: OllamaStandIn) -> Embedder:
        return OllamaEmbedder("standin-embed", host=standin.host, timeout_s=5.0)

    @pytest.fixture
    def broken_embedder(self) -> Embedder:
        return OllamaEmbedder(
            "standin-embed",
            host=f"http://127.0.0.1:{_closed_port()}",
            timeout_s=2.0,
            health_timeout_s=2.0,
        )


class TestFakeContract(EmbedderContract):
    @pytest.fixture
    def embedder(self) -> Embedder:
        return HashEmbedder(dimension=16)

    @pytest.fixture
    def broken_embedder(self) -> Embedder:
        fake = HashEmbedder(dimension=16)
        fake.down = True
        return fake
