"""The corpus's vector index: ``CorpusConfig.vector_storage`` reaches it and survives a
reopen; its HNSW graph is built in the background while the corpus answers; closing the
engine mid-build stops the builder; a finished graph is saved and reopened, not rebuilt."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

import engine.write.vector_keeper
from dense import FaissIndex, IndexKind, VectorStorage
from engine import CorpusConfig, Document, SearchEngine
from tests.support.fakes import SwitchableEmbedder

TIMEOUT = 120.0


def docs(n: int) -> list[Document]:
    return [Document(id=f"d{i}", title=f"title {i}", text=f"word{i} shared") for i in range(n)]


def test_config_default_is_float32_and_names_the_valid_choices() -> None:
    assert CorpusConfig(name="c").vector_storage is VectorStorage.FLOAT32
    parsed = CorpusConfig.model_validate({"name": "c", "vector_storage": "sq8"})
    assert parsed.vector_storage is VectorStorage.SQ8
    with pytest.raises(ValidationError, match="sq8"):
        CorpusConfig.model_validate({"name": "c", "vector_storage": "pq"})


def test_sq8_choice_reaches_the_index_and_survives_a_reopen(
    tmp_path: Path, hash_embedder: SwitchableEmbedder
) -> None:
    with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", vector_storage=VectorStorage.SQ8))
        corpus.add(docs(20))
        index = corpus._indexes.faiss
        assert index is not None and index.storage is VectorStorage.SQ8
    saved = json.loads((tmp_path / "corpora" / "c" / "config.json").read_text())
    assert saved["vector_storage"] == "sq8"
    with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as eng:
        corpus = eng.corpus("c")
        index = corpus._indexes.faiss
        assert index is not None and index.storage is VectorStorage.SQ8
        assert corpus.search("word7")[0].source_id == "d7"


def small_graphs(monkeypatch: pytest.MonkeyPatch, gate: threading.Event) -> list[FaissIndex]:
    """Corpora build graphs from 10 vectors, held at ``gate``; returns the indexes made."""
    made: list[FaissIndex] = []

    class Recording(FaissIndex):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["hnsw_threshold"] = 10
            kwargs["build_delay_s"] = 0
            kwargs.setdefault("build_gate", gate)
            super().__init__(*args, **kwargs)
            made.append(self)

        @classmethod
        def load(cls, *args: Any, **kwargs: Any) -> Any:
            loaded = super().load(*args, build_gate=gate, **kwargs)
            made.append(loaded)
            return loaded

    monkeypatch.setattr(engine.write.vector_keeper, "FaissIndex", Recording)
    return made


def test_corpus_answers_during_the_build_and_saves_the_graph(
    tmp_path: Path, hash_embedder: SwitchableEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    made = small_graphs(monkeypatch, gate)
    with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c"))
        corpus.add(docs(40))
        assert corpus.stats()["vector_graph_pending"] is True
        assert corpus.search("word12")[0].source_id == "d12"  # exact meanwhile
        gate.set()
        assert made[-1].wait_for_graph(TIMEOUT) and made[-1].kind is IndexKind.HNSW
        assert corpus.stats()["vector_graph_pending"] is False
        assert corpus.search("word12")[0].source_id == "d12"
    with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as eng:
        corpus = eng.corpus("c")
        assert corpus.search("word31")[0].source_id == "d31"
        reopened = made[-1]
        assert reopened.kind is IndexKind.HNSW and not reopened.graph_pending  # from the file


def test_closing_the_engine_mid_build_stops_the_builder(
    tmp_path: Path, hash_embedder: SwitchableEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    made = small_graphs(monkeypatch, gate)
    with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c"))
        corpus.add(docs(40))
        builder = made[-1]._builder.thread
        assert builder is not None and builder.is_alive()
    assert not builder.is_alive()
    gate.set()
    with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as eng:
        corpus = eng.corpus("c")  # nothing was lost; the graph is built again
        assert corpus.stats()["vectors"] == 40
        assert made[-1].wait_for_graph(TIMEOUT) and made[-1].kind is IndexKind.HNSW
        assert corpus.search("word5")[0].source_id == "d5"
