"""An SQ8 index re-ranks from the float vectors without reading them through the memory
map of its saved file (which made the whole section resident: ``dense._row_reader``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dense import FaissIndex, VectorStorage
from dense._row_reader import RowReader
from dense.index_file import map_vectors


class _ThroughTheMap:
    """Stands in for the mapped base: any read through it fails the test."""

    def __init__(self, real: Any) -> None:
        self.shape, self.dtype = real.shape, real.dtype

    def __getitem__(self, item: object) -> Any:
        raise AssertionError("a base row was read through the memory map")

    def __matmul__(self, other: object) -> Any:
        raise AssertionError("the base was scanned through the memory map")


def _sq8_index(n: int = 3_000, dim: int = 32) -> tuple[FaissIndex, np.ndarray]:
    rng = np.random.default_rng(7)
    index = FaissIndex(dim, hnsw_threshold=0, storage=VectorStorage.SQ8, build_delay_s=0.0)
    index.add([f"d{i}" for i in range(n)], rng.standard_normal((n, dim)).astype(np.float32))
    assert index.wait_for_graph(timeout=300)
    return index, rng.standard_normal((25, dim)).astype(np.float32)


def _same(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    return [i for i, _ in a] == [i for i, _ in b] and np.allclose(
        [s for _, s in a], [s for _, s in b], atol=1e-6
    )


def test_a_reopened_sq8_index_re_ranks_with_pread_and_answers_the_same(tmp_path: Path) -> None:
    index, queries = _sq8_index()
    before = [index.search(q, 10) for q in queries]
    path = tmp_path / "sq8.faiss"
    index.save(path)
    # the saving index now serves from the file too: same answers, no reads through the map
    assert index._store.base_reader is not None
    index._store.base = _ThroughTheMap(index._store.base)  # type: ignore[assignment]
    assert all(_same(index.search(q, 10), hit) for q, hit in zip(queries, before, strict=True))
    index.close()
    reopened = FaissIndex.load(path)
    try:
        assert reopened._store.base_reader is not None
        reopened._store.base = _ThroughTheMap(reopened._store.base)  # type: ignore[assignment]
        answers = [reopened.search(q, 10) for q in queries]
        assert all(_same(a, b) for a, b in zip(answers, before, strict=True))
    finally:
        reopened.close()


def test_a_float32_index_keeps_reading_its_own_vectors(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    index = FaissIndex(16, hnsw_threshold=0, build_delay_s=0.0)
    index.add([f"d{i}" for i in range(500)], rng.standard_normal((500, 16)).astype(np.float32))
    assert index.wait_for_graph(timeout=300)
    index.save(tmp_path / "f.faiss")
    index.close()
    reopened = FaissIndex.load(tmp_path / "f.faiss")
    try:
        assert reopened._store.base_reader is None  # the graph's own storage is the base
        assert len(reopened.search(rng.standard_normal(16).astype(np.float32), 5)) == 5
    finally:
        reopened.close()


def test_the_row_reader_reads_the_file_it_was_opened_on_even_after_a_rename(
    tmp_path: Path,
) -> None:
    rows = np.arange(40, dtype=np.float32).reshape(10, 4)
    path = tmp_path / "rows.bin"
    path.write_bytes(b"x" * 64 + rows.astype("<f4").tobytes())
    mapped, reader = map_vectors(path, 64, (10, 4))
    wanted = np.array([7, 0, 3], dtype=np.int64)
    assert np.array_equal(reader.rows(wanted), rows[wanted])
    assert np.array_equal(np.asarray(mapped)[wanted], rows[wanted])
    other = tmp_path / "other.bin"
    other.write_bytes(b"y" * 64 + (rows + 100).astype("<f4").tobytes())
    os.replace(other, path)  # a later save renames a new file over the path
    assert np.array_equal(reader.rows(wanted), rows[wanted])
    with pytest.raises(IndexError):
        reader.rows(np.array([10], dtype=np.int64))


def test_a_reader_closes_its_descriptor_when_collected(tmp_path: Path) -> None:
    path = tmp_path / "rows.bin"
    path.write_bytes(np.zeros((2, 4), dtype="<f4").tobytes())
    fd = os.open(path, os.O_RDONLY)
    reader = RowReader(fd, 0, (2, 4))
    assert reader.rows(np.array([1], dtype=np.int64)).shape == (1, 4)
    del reader
    with pytest.raises(OSError):
        os.fstat(fd)
