"""FaissIndex edge cases from review: a numpy integer ``k``, and a saved graph whose outer
``IndexIDMap`` dimension was damaged (it loaded, then every search hit a FAISS assert)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dense.index_file
from dense import FaissIndex, FaissIndexCorrupt

DIM = 16
HNSW: dict[str, Any] = {"hnsw_threshold": 0, "exact_filter_limit": 0, "build_delay_s": 0}
OUTER_D = 4  # the file opens with the IndexIDMap: fourcc (4 bytes), then its int32 ``d``


def _index(n: int = 200, **params: Any) -> tuple[FaissIndex, np.ndarray]:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    index = FaissIndex(DIM, **params)
    index.add([f"d{i}" for i in range(n)], vectors)
    assert index.wait_for_graph(timeout=120)
    return index, vectors


@pytest.mark.parametrize("k", [np.int64(3), np.int32(3), np.uint8(3), 3])
def test_k_may_be_any_integral(k: Any) -> None:
    index, vectors = _index(n=20)
    hits = index.search(vectors[0], k)
    assert len(hits) == 3 and hits[0][0] == "d0"
    assert hits == index.search(vectors[0], 3)


@pytest.mark.parametrize("k", [True, np.True_, 0, np.int64(0), -1, 2.0, np.float64(2), "3", None])
def test_k_that_is_no_positive_integral_is_rejected(k: Any) -> None:
    index, vectors = _index(n=20)
    with pytest.raises(ValueError, match="k must be a positive int"):
        index.search(vectors[0], k)


@pytest.mark.parametrize("storage", ["float32", "sq8"])
@pytest.mark.parametrize("outer_d", [0, 8, 17, 255])
def test_a_damaged_outer_graph_dimension_is_corrupt(
    storage: str, outer_d: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, vectors = _index(storage=storage, **HNSW)
    path = tmp_path / "dense.idx"
    index.save(path)
    index.close()
    raw = bytearray(path.read_bytes())
    assert struct.unpack_from("<i", raw, OUTER_D)[0] == DIM  # the field the test alters
    struct.pack_into("<i", raw, OUTER_D, outer_d)
    path.write_bytes(bytes(raw))
    # As for a large file: the graph's checksum is checked after opening, not before, so
    # the structural checks are all that stand between the damage and a search.
    monkeypatch.setattr(dense.index_file, "VERIFY_AT_OPEN_BYTES", 0)
    try:
        loaded = FaissIndex.load(path)
    except FaissIndexCorrupt:
        return
    try:  # what used to happen: it loaded, and the search raised a bare AssertionError
        loaded.search(vectors[0], 5)
    finally:
        loaded.close()
    pytest.fail("a graph with a damaged dimension loaded")
