"""The OpenMP thread policy: searches run with their index's search setting on whichever
thread issues them; background graph builds run on all cores but one; the caller's own
setting is restored afterwards; two indexes with different settings never affect each
other."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from dense import FaissIndex, IndexKind
from dense._faiss import background_build_threads, build_threads, faiss_module, omp_threads

DIM = 8


class ThreadRecorder:
    """Wraps a FAISS index and records the OpenMP thread count each call ran under."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.search_threads: list[int] = []
        self.add_threads: list[int] = []

    def search(self, *args: Any, **kwargs: Any) -> Any:
        self.search_threads.append(int(faiss_module().omp_get_max_threads()))
        return self.inner.search(*args, **kwargs)

    def add_with_ids(self, *args: Any, **kwargs: Any) -> Any:
        self.add_threads.append(int(faiss_module().omp_get_max_threads()))
        return self.inner.add_with_ids(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def vectors(n: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x


def on_new_thread(fn: Any) -> Any:
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join(timeout=60)
    assert out, "worker thread did not finish"
    return out[0]


def graph_index(n: int, **params: Any) -> FaissIndex:
    """An index whose searches walk an HNSW graph (exact searches never call FAISS)."""
    index = FaissIndex(DIM, hnsw_threshold=0, **params)
    index.add([f"d{i}" for i in range(n)], vectors(n))
    assert index.wait_for_graph(timeout=60)
    return index


def record_searches(index: FaissIndex) -> ThreadRecorder:
    graph = index._graph
    assert graph is not None
    recorder = ThreadRecorder(graph.index)
    graph.index = recorder
    return recorder


def test_search_from_another_thread_uses_the_index_setting() -> None:
    index = graph_index(50, search_threads=1)
    recorder = record_searches(index)

    def search_and_report() -> int:
        index.search(vectors(1, seed=1)[0], 5)
        return int(faiss_module().omp_get_max_threads())

    threads_after = on_new_thread(search_and_report)
    assert recorder.search_threads == [1]
    # the request thread's own OpenMP setting is left as it was
    assert threads_after == build_threads()


def test_hnsw_build_leaves_a_core_to_searches_which_use_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import dense._graph

    recorders: list[ThreadRecorder] = []
    real_new = dense._graph.new_graph_index

    def recording_new(*args: Any) -> ThreadRecorder:
        recorders.append(ThreadRecorder(real_new(*args)))
        return recorders[-1]

    monkeypatch.setattr(dense._graph, "new_graph_index", recording_new)
    index = graph_index(200, search_threads=1)
    hits = index.search(vectors(1, seed=2)[0], 3)
    assert len(hits) == 3 and index.kind is IndexKind.HNSW
    assert recorders[-1].add_threads == [background_build_threads()]
    assert background_build_threads() == max(1, build_threads() - 1)
    assert recorders[-1].search_threads == [1]
    index.close()


def test_omp_threads_restores_the_previous_count() -> None:
    faiss = faiss_module()
    before = int(faiss.omp_get_max_threads())
    with omp_threads(1):
        assert faiss.omp_get_max_threads() == 1
    assert faiss.omp_get_max_threads() == before
    with pytest.raises(RuntimeError), omp_threads(1):
        raise RuntimeError("boom")
    assert faiss.omp_get_max_threads() == before


def test_two_indexes_keep_their_own_search_threads() -> None:
    one = graph_index(20, search_threads=1)
    default = graph_index(20, search_threads=None)
    recorders = [record_searches(one), record_searches(default)]
    with omp_threads(2):  # the caller's own setting, which the None index keeps
        one.search(vectors(1, seed=3)[0], 3)
        default.search(vectors(1, seed=3)[0], 3)
    assert recorders[0].search_threads == [1]
    assert recorders[1].search_threads == [2]


def test_reloading_keeps_the_callers_search_threads(tmp_path: Any) -> None:
    index = FaissIndex(DIM, search_threads=1)
    index.add([f"d{i}" for i in range(20)], vectors(20))
    index.save(tmp_path / "v.faiss")
    assert FaissIndex.load(tmp_path / "v.faiss", search_threads=None).search_threads is None
    assert FaissIndex.load(tmp_path / "v.faiss").search_threads == 1


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_search_threads_rejects_non_positive_ints(bad: object) -> None:
    with pytest.raises(ValueError):
        FaissIndex(DIM, search_threads=bad)  # type: ignore[arg-type]
