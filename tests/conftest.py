"""Session-wide fixtures shared by every test package."""

from __future__ import annotations

import logging
from collections.abc import Iterator
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


_OWN_LOGGERS = ("engine", "sparse", "dense", "fusion", "bench")


@pytest.fixture(autouse=True)
def _logging_restored() -> Iterator[None]:
    """Undo what an in-process CLI run does to logging (the ``tandem`` callback sets our
    loggers to ERROR): a later test's ``caplog`` must see every record, whichever test
    ran before it. (Root handlers are pytest's own during a test: left alone.)"""
    levels = {name: logging.getLogger(name).level for name in _OWN_LOGGERS}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)
