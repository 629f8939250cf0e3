"""A saved index file overwritten in place (same inode: ``rsync --inplace``, a stray tool,
a failing disk) while a reopened index maps its vectors. The map shows the damage; a
save that copied it used to write it under fresh sha256 digests, so the next open
trusted it and the damage outlived the store's good vectors. A save now checks the
mapped vectors against the digests their file recorded and refuses (``FaissIndexCorrupt``,
``damaged`` set, the old file left in place) so the caller rebuilds from its store."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dense import FaissIndex, FaissIndexCorrupt, VectorStorage
from engine import Corpus, CorpusConfig, Document, SearchEngine
from tests.support.fakes import HashEmbedder

DIM = 16
_TRAILER = struct.Struct("<8sIQQQ32s")  # the format's trailer, read independently here


def _vectors(n: int, seed: int = 3) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _base_span(path: Path) -> tuple[int, int]:
    """Offset and length of the ``base_vectors`` section, from the file's header."""
    data = path.read_bytes()
    _magic, _version, at, length, _end, _digest = _TRAILER.unpack(data[-_TRAILER.size :])
    offset, size, _sha = json.loads(data[at : at + length])["sections"]["base_vectors"]
    return int(offset), int(size)


def _scribble(path: Path) -> None:
    """Overwrite the middle of the base vectors in place (the inode stays the same)."""
    offset, size = _base_span(path)
    inode = path.stat().st_ino
    with open(path, "r+b") as fh:
        fh.seek(offset + size // 4)
        fh.write(np.full(size // 8, 7.5, dtype="<f4").tobytes()[: size // 2])
    assert path.stat().st_ino == inode


def _flat(n: int = 200) -> tuple[FaissIndex, np.ndarray]:
    index = FaissIndex(DIM, hnsw_threshold=10_000, build_delay_s=0.0)
    vectors = _vectors(n)
    index.add([f"d{i}" for i in range(n)], vectors)
    return index, vectors


def _sq8(n: int = 300) -> tuple[FaissIndex, np.ndarray]:
    index = FaissIndex(DIM, hnsw_threshold=0, storage=VectorStorage.SQ8, build_delay_s=0.0)
    vectors = _vectors(n)
    index.add([f"d{i}" for i in range(n)], vectors)
    assert index.wait_for_graph(timeout=120)
    return index, vectors


def _refused_save(index: FaissIndex, path: Path, damaged_bytes: bytes) -> None:
    with pytest.raises(FaissIndexCorrupt, match="changed on disk"):
        index.save(path)
    assert index.damaged is not None
    assert path.read_bytes() == damaged_bytes  # not replaced ...
    with pytest.raises(FaissIndexCorrupt):  # ... so its checksums still give it away
        FaissIndex.load(path)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp file


@pytest.mark.parametrize("build", [_flat, _sq8], ids=["flat", "sq8-graph"])
def test_a_save_does_not_reseal_vectors_damaged_in_place_under_the_map(
    build: Callable[[], tuple[FaissIndex, np.ndarray]], tmp_path: Path
) -> None:
    index, vectors = build()
    path = tmp_path / "vectors.faiss"
    index.save(path)
    loaded = FaissIndex.load(path)  # base vectors memory-mapped from the file
    loaded.add(["new"], _vectors(1, seed=9))  # a write, then a save, as an engine does
    loaded.save(path)  # undamaged: saves (and maps the new file when sq8)
    reopened = FaissIndex.load(path)
    assert reopened.search(vectors[7], 1)[0][0] == "d7"
    _scribble(path)
    _refused_save(reopened, path, path.read_bytes())
    # Another destination is refused as well: the damage is in what would be copied.
    with pytest.raises(FaissIndexCorrupt):
        reopened.save(tmp_path / "elsewhere" / "copy.faiss")
    assert not any((tmp_path / "elsewhere").iterdir())


def test_a_save_refuses_the_map_an_sq8_save_made_of_its_own_file(tmp_path: Path) -> None:
    """After saving, an SQ8 index maps its float vectors from the new file; that map
    carries the new file's digest."""
    index, _vectors_saved = _sq8()
    path = tmp_path / "vectors.faiss"
    index.save(path)
    assert type(index._store.base) is not np.ndarray  # now read from the file
    _scribble(path)
    _refused_save(index, path, path.read_bytes())


def test_an_undamaged_mapped_index_saves_again_and_again(tmp_path: Path) -> None:
    index, _vectors_saved = _flat()
    path = tmp_path / "vectors.faiss"
    index.save(path)
    loaded = FaissIndex.load(path)
    for round_ in range(3):
        loaded.save(path)
        loaded.add([f"n{round_}"], _vectors(1, seed=round_))
    loaded.save(path)
    assert loaded.damaged is None
    assert len(FaissIndex.load(path)) == 203


def _top(corpus: Corpus, query: str) -> list[tuple[str, int | None]]:
    hits = corpus.search(query, top_k=3)
    return [(hit.source_id, hit.ranks.dense) for hit in hits]


def test_an_engine_replaces_a_vector_file_damaged_in_place_from_its_store(
    tmp_path: Path,
) -> None:
    embedder = HashEmbedder(dimension=64, name="m")
    docs = [Document(id=f"d{i}", title=f"T{i}", text=f"alpha word{i} w{i % 7}") for i in range(400)]
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="docs", embedder="m"))
        corpus.add(docs)
        good = _top(corpus, "word123")
    assert good[0] == ("d123", 1)
    path = tmp_path / "corpora" / "docs" / "vectors.faiss"
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as eng:
        corpus = eng.corpus("docs")
        assert _top(corpus, "word123") == good
        _scribble(path)
        corpus.add([Document(id="n1", title="n", text="alpha new")])
        corpus.flush()  # the save notices the damage; the store's vectors replace it
        assert _top(corpus, "word123")[0] == ("d123", 1)
    FaissIndex.load(path)  # a sound file: it passes its checksums
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as eng:
        corpus = eng.corpus("docs")
        assert _top(corpus, "word123")[0] == ("d123", 1)
        assert corpus.stats()["vectors"] == 401


def test_a_damaged_graph_length_that_fails_allocation_is_corruption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a flipped length field in a large file's graph (opened before its
    checksums run) made FAISS's read raise MemoryError (std::bad_alloc), which escaped as
    a failed open instead of the FaissIndexCorrupt that rebuilds from the store."""
    import dense._graph as graph_module
    import dense.index_file as index_file

    index, _ = _sq8()
    path = tmp_path / "v.faiss"
    index.save(path)
    index.close()
    real = graph_module.faiss_module()

    class Exhausted:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        @staticmethod
        def read_index(*args: object) -> object:
            raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(index_file, "VERIFY_AT_OPEN_BYTES", 0)  # the large-file path
    monkeypatch.setattr(graph_module, "faiss_module", lambda: Exhausted())
    with pytest.raises(FaissIndexCorrupt):
        FaissIndex.load(path)


def _graph_field_offsets(path: Path) -> dict[str, int]:
    """Where the graph's array length fields sit, read independently of the engine from
    FAISS's layout of an ``IndexIDMap`` over an ``IndexHNSW*`` (each index header: a
    fourcc and 33 bytes; each array: a u64 count, then the items)."""
    data = path.read_bytes()
    at, offsets = 2 * (4 + 33), {}
    for name, item_bytes in (("probas", 8), ("cum", 4), ("levels", 4), ("offsets", 8)):
        offsets[name] = at
        at += 8 + struct.unpack_from("<Q", data, at)[0] * item_bytes
    return offsets


@pytest.mark.parametrize("field", ["probas", "levels", "offsets"])
@pytest.mark.parametrize("storage", ["float32", "sq8"])
def test_a_graph_length_past_its_section_is_refused_before_faiss_allocates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, storage: str
) -> None:
    """A damaged array length in a large file's graph made FAISS allocate (and zero-fill)
    what it said before the short read failed — up to the machine's memory. The lengths
    are now checked against the section first, and FAISS is never asked to read it."""
    import dense._graph as graph_module
    import dense.index_file as index_file
    from dense._graph_layout import walk_matches_faiss

    assert walk_matches_faiss()  # else the check is off, silently, for this FAISS
    index = FaissIndex(DIM, hnsw_threshold=0, storage=storage, build_delay_s=0.0)
    index.add([f"d{i}" for i in range(300)], _vectors(300))
    assert index.wait_for_graph(timeout=120)
    path = tmp_path / "v.faiss"
    index.save(path)
    index.close()
    with open(path, "r+b") as fh:
        fh.seek(_graph_field_offsets(path)[field])
        fh.write(struct.pack("<Q", 1 << 32))  # 4 Gi items: 16-32 GiB zero-filled
    real, reads = graph_module.faiss_module(), []

    class Spy:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        @staticmethod
        def read_index(*args: object) -> object:
            reads.append(args)
            raise MemoryError("the test refuses to allocate")

    monkeypatch.setattr(index_file, "VERIFY_AT_OPEN_BYTES", 0)  # the large-file path
    monkeypatch.setattr(graph_module, "faiss_module", lambda: Spy())
    with pytest.raises(FaissIndexCorrupt, match="claims 4294967296 items"):
        FaissIndex.load(path)
    assert reads == []
