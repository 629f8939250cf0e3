"""Shared fixtures for the bench tests: a tiny BEIR folder and the real model, loaded once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.encoder import SentenceEncoder
from tests.bench.tiny_beir import write_beir


@pytest.fixture(scope="session")
def tiny_beir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_beir(tmp_path_factory.mktemp("beir") / "tiny")


@pytest.fixture(scope="session")
def encoder() -> Iterator[SentenceEncoder]:
    """The real all-MiniLM-L6-v2 (torch), loaded once per session."""
    yield SentenceEncoder().load()
