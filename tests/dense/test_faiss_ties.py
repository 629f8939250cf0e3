"""Equal similarities are ordered by id, so two builds of one corpus rank identically
whatever order (and batches) the vectors were added in."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dense import FaissIndex
from dense.faiss_index import IndexKind


def corpus(seed: int) -> tuple[list[str], np.ndarray]:
    """200 vectors: 30 copies of one direction (exact ties), the rest random; shuffled."""
    rng = np.random.default_rng(7)
    base = rng.standard_normal((170, 16)).astype(np.float32)
    twin = np.tile(rng.standard_normal((1, 16)).astype(np.float32), (30, 1))
    ids = [f"r{n:03d}" for n in range(170)] + [f"t{n:03d}" for n in range(30)]
    vectors = np.vstack([base, twin])
    order = np.random.default_rng(seed).permutation(len(ids))
    return [ids[i] for i in order], vectors[order]


def build(seed: int, batch: int) -> FaissIndex:
    ids, vectors = corpus(seed)
    index = FaissIndex(16)
    for start in range(0, len(ids), batch):
        index.add(ids[start : start + batch], vectors[start : start + batch])
    return index


@pytest.mark.parametrize("k", [1, 5, 29, 30, 31, 45, 200])
def test_two_builds_rank_identically_and_ties_go_by_id(k: int) -> None:
    one, other = build(seed=1, batch=200), build(seed=2, batch=7)
    ids, vectors = corpus(1)
    twin_query = vectors[ids.index("t000")]
    for query in (twin_query, np.random.default_rng(3).standard_normal(16)):
        a, b = one.search(query, k), other.search(query, k)
        assert a == b
        keys = [(-score, doc_id) for doc_id, score in a]
        assert keys == sorted(keys)
    top = [doc_id for doc_id, _ in one.search(twin_query, k)]
    assert top[: min(k, 30)] == [f"t{n:03d}" for n in range(min(k, 30))]


def test_ties_by_id_with_an_allow_list() -> None:
    one, other = build(seed=1, batch=200), build(seed=2, batch=13)
    ids, vectors = corpus(1)
    twin = vectors[ids.index("t000")]
    allowed = [f"t{n:03d}" for n in range(0, 30, 2)] + ["r001", "r002"]
    a = one.search(twin, 4, allow=allowed)
    assert a == other.search(twin, 4, allow=allowed)
    assert [doc_id for doc_id, _ in a] == ["t000", "t002", "t004", "t006"]


@pytest.mark.parametrize("storage", ["float32", "sq8"])
def test_a_vector_in_the_graph_ties_its_twin_in_the_tail_by_id(storage: str) -> None:
    """The graph's candidates are scored as the tail's are: FAISS's SIMD sums can differ
    from the exact path's in the last bit, and a tie must not depend on where a row sits."""
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((600, 96)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    gate = threading.Event()
    gate.set()
    index = FaissIndex(96, hnsw_threshold=0, storage=storage, build_gate=gate)
    index.add([f"m{n:04d}" for n in range(600)], vectors)
    assert index.wait_for_graph(timeout=120) and index.kind is IndexKind.HNSW
    gate.clear()  # the twins stay in the tail: no build folds them into the graph
    twins = range(0, 120, 3)
    index.add([f"a{n:04d}" for n in twins], vectors[list(twins)])  # before "m" by id
    index.add([f"z{n:04d}" for n in twins], vectors[list(twins)])  # after it
    for n in twins:
        query = vectors[n] + 0.7 * vectors[n + 1]
        hits = index.search(query, 10)
        copies = [(doc_id, score) for doc_id, score in hits if doc_id[1:] == f"{n:04d}"]
        assert [doc_id for doc_id, _ in copies] == [f"{p}{n:04d}" for p in "amz"]
        assert len({score for _, score in copies}) == 1
    gate.set()
    index.close()
