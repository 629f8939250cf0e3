"""Eager vector-index saves during bulk loads grow geometrically (each save rewrites every
vector, so a fixed interval would make a bulk load quadratic), and what a crash leaves
unsaved is replayed from the store on the next open."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

import dense.index_file
import engine.write.vector_keeper
from dense import FaissIndex
from engine import CorpusConfig, Document, SearchEngine
from tests.support.fakes import SwitchableEmbedder

BATCH = 10
BATCHES = 40


def test_bulk_load_saves_a_logarithmic_number_of_times_and_loses_nothing(
    tmp_path: Path, hash_embedder: SwitchableEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engine.write.vector_keeper, "_FAISS_SAVE_EVERY", BATCH)
    saved_sizes: list[int] = []
    real_save = FaissIndex.save

    def counting_save(self: FaissIndex, path: str | Path, **kwargs: Any) -> None:
        saved_sizes.append(len(self))
        real_save(self, path, **kwargs)

    monkeypatch.setattr(FaissIndex, "save", counting_save)
    with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c"))
        for b in range(BATCHES):
            corpus.add(
                [
                    Document(id=f"d{b}-{i}", title=f"t{b}", text=f"word{b}x{i} common")
                    for i in range(BATCH)
                ]
            )
        during_load = list(saved_sizes)
        last_saved = saved_sizes[-1]
        # Simulate a crash: the engine's own close would save; drop its handle instead.
        directory = tmp_path / "corpora" / "c"
        vectors_marker = (directory / "vectors.seq").read_text()
        vectors_file = (directory / "vectors.faiss").read_bytes()
    (directory / "vectors.seq").write_text(vectors_marker)
    (directory / "vectors.faiss").write_bytes(vectors_file)

    # A fixed interval of BATCH would have saved BATCHES times.
    assert 3 <= len(during_load) <= 12, during_load
    assert all(b >= a for a, b in itertools.pairwise(during_load))
    assert last_saved < BATCH * BATCHES  # the tail really was left unsaved
    with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as eng:
        corpus = eng.corpus("c")
        assert corpus.stats()["vectors"] == BATCH * BATCHES
        assert corpus.search("word39x7")[0].source_id == "d39-7"


def test_a_vector_file_damaged_past_its_opening_check_is_replaced_from_the_store(
    tmp_path: Path, hash_embedder: SwitchableEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Large files are mapped at once and checksummed in the background; when that check
    fails, searches stop using the file's vectors and the next flush writes it anew."""
    docs = [Document(id=f"d{i}", text=f"word{i} common") for i in range(300)]
    with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as eng:
        eng.create_corpus(CorpusConfig(name="c")).add(docs)
    path = tmp_path / "corpora" / "c" / "vectors.faiss"
    data = bytearray(path.read_bytes())
    for at in range(len(data) // 3, len(data) // 3 + 64):  # inside the vectors
        data[at] = 0x7F  # huge floats: scores no unit vectors can have
    path.write_bytes(bytes(data))
    monkeypatch.setattr(dense.index_file, "VERIFY_AT_OPEN_BYTES", 0)  # check in background
    with SearchEngine(tmp_path, embedder_factory=lambda spec: hash_embedder) as eng:
        corpus = eng.corpus("c")
        loaded = corpus._indexes.faiss
        assert loaded is not None and loaded.wait_for_graph(60)
        assert loaded.damaged is not None
        hits = corpus.search("word7")
        assert hits[0].source_id == "d7" and hits[0].ranks.dense == 1
        assert corpus._indexes.faiss is not loaded and corpus.stats()["vectors"] == 300
    monkeypatch.undo()
    assert len(FaissIndex.load(path)) == 300  # rewritten whole: passes the check at once
