"""The HNSW graph is built in the background: searches answer exactly until it serves,
the swap is atomic, writes during a build are kept, close() stops the build, and a
restart mid-build loses nothing. Builds are held at a known point with ``build_gate``
(nothing here sleeps to wait for a build)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import dense._policy
import dense.index_file
from dense import FaissIndex, FaissIndexCorrupt, IndexKind, VectorStorage
from tests.support.unit_vectors import unit_vectors

DIM = 16
N = 400
THRESHOLD = 300
TIMEOUT = 120.0


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    return unit_vectors(rng, n, dim)


def kind_of(index: FaissIndex) -> IndexKind:
    return index.kind  # a call, so the type checker does not narrow across mutations


def exact(model: dict[str, np.ndarray], query: np.ndarray, k: int) -> list[str]:
    ids = list(model)
    scores = np.stack([model[i] for i in ids]) @ query
    order = sorted(range(len(ids)), key=lambda i: (-scores[i], i))
    return [ids[i] for i in order[:k]]


Model = dict[str, np.ndarray]


def gated_index(gate: threading.Event) -> tuple[FaissIndex, Model]:
    vectors = unit(np.random.default_rng(0), N)
    index = FaissIndex(DIM, hnsw_threshold=THRESHOLD, build_gate=gate, build_delay_s=0)
    ids = [f"d{i}" for i in range(N)]
    index.add(ids, vectors)
    return index, dict(zip(ids, vectors, strict=True))


def test_searches_are_exact_while_the_graph_builds_then_it_serves() -> None:
    gate = threading.Event()
    index, model = gated_index(gate)
    try:
        assert index.graph_pending and index.kind is IndexKind.FLAT
        queries = unit(np.random.default_rng(1), 20)
        for q in queries:  # exact over the same vectors: identical to brute force
            assert [d for d, _ in index.search(q, 10)] == exact(model, q, 10)
        assert index.kind is IndexKind.FLAT  # nothing waited for the held build
        gate.set()
        assert index.wait_for_graph(TIMEOUT)
        assert kind_of(index) is IndexKind.HNSW and not index.graph_pending
        found = sum(
            len(set(exact(model, q, 10)) & {d for d, _ in index.search(q, 10)}) for q in queries
        )
        assert found / (10 * len(queries)) >= 0.9
        for doc_id in ("d0", "d123", "d399"):
            ((top, score),) = index.search(model[doc_id], 1)
            assert top == doc_id and score == pytest.approx(1.0, abs=1e-5)
    finally:
        index.close()


def test_writes_made_during_a_build_are_kept_after_the_swap() -> None:
    gate = threading.Event()
    index, model = gated_index(gate)
    rng = np.random.default_rng(2)
    try:
        new = unit(rng, 12)
        index.add(["d1"], new[0])  # replaces a vector the build snapshot holds
        model["d1"] = new[0]
        index.remove(["d2", "d3"])
        del model["d2"], model["d3"]
        index.add([f"n{i}" for i in range(10)], new[1:11])
        model.update({f"n{i}": new[1 + i] for i in range(10)})
        gate.set()
        assert index.wait_for_graph(TIMEOUT) and index.kind is IndexKind.HNSW
        index.add(["n10"], new[11])  # after the swap: lands in the exact tail
        model["n10"] = new[11]
        assert len(index) == len(model) and sorted(index.ids()) == sorted(model)
        for doc_id, vector in model.items():
            top = index.search(vector, 3)
            assert top[0][0] == doc_id, doc_id
            assert {"d2", "d3"}.isdisjoint(d for d, _ in top)
        # filtered searches see the same state, on the graph and on the tail
        allow = ["d1", "d2", "n3", "n10", "d50"]
        hits = index.search(model["n3"], 10, allow=allow)
        assert sorted(d for d, _ in hits) == sorted(["d1", "n3", "n10", "d50"])
    finally:
        index.close()


def test_the_swap_is_invisible_to_concurrent_searches() -> None:
    gate = threading.Event()
    index, model = gated_index(gate)
    probes = list(model.items())[::20]
    errors: list[BaseException] = []
    stop = threading.Event()
    kinds_seen: set[IndexKind] = set()

    def reader() -> None:
        try:
            while not stop.is_set():
                kinds_seen.add(index.kind)
                for doc_id, vector in probes:
                    hits = index.search(vector, 10)
                    assert len(hits) == 10 and hits[0][0] == doc_id
                    scores = [s for _, s in hits]
                    assert scores == sorted(scores, reverse=True)
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        gate.set()
        assert index.wait_for_graph(TIMEOUT)
    finally:
        stop.set()
        for t in threads:
            t.join(TIMEOUT)
        index.close()
    assert not errors, errors[0]
    assert index.kind is IndexKind.HNSW


def test_close_during_a_build_stops_it_and_holds_nothing() -> None:
    gate = threading.Event()
    index, model = gated_index(gate)
    builder = index._builder.thread
    assert builder is not None and builder.is_alive()
    index.close()
    assert not builder.is_alive() and index._builder.thread is None
    assert index.kind is IndexKind.FLAT and not index.wait_for_graph(1.0)
    q = model["d5"]
    assert index.search(q, 1)[0][0] == "d5"  # still answers, exactly
    index.add(["late"], q)  # and takes writes, without starting a builder
    assert index._builder.thread is None


def test_a_restart_mid_build_loses_nothing_and_builds_again(tmp_path: Path) -> None:
    gate = threading.Event()
    index, model = gated_index(gate)
    path = tmp_path / "v.faiss"
    index.save(path)  # the graph is still being built: the file holds none
    index.close()
    reopened_gate = threading.Event()
    loaded = FaissIndex.load(path, build_gate=reopened_gate)
    try:
        assert len(loaded) == N and loaded.kind is IndexKind.FLAT and loaded.graph_pending
        q = unit(np.random.default_rng(3), 1)[0]
        assert [d for d, _ in loaded.search(q, 10)] == exact(model, q, 10)
        reopened_gate.set()
        assert loaded.wait_for_graph(TIMEOUT) and kind_of(loaded) is IndexKind.HNSW
        loaded.save(path)
    finally:
        loaded.close()
    again = FaissIndex.load(path)  # the graph came back from the file: nothing to build
    assert again.kind is IndexKind.HNSW and not again.graph_pending
    assert again.search(model["d7"], 1)[0][0] == "d7"


def test_enough_changes_trigger_a_fresh_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense._policy, "REBUILD_MIN", 50)
    gate = threading.Event()
    index, _model = gated_index(gate)
    gate.set()
    assert index.wait_for_graph(TIMEOUT)
    graph = index._graph
    rng = np.random.default_rng(4)
    index.add([f"m{i}" for i in range(30)], unit(rng, 30))
    assert index._graph is graph and not index.graph_pending  # 30 pending: tail only
    index.remove([f"d{i}" for i in range(30)])  # 60 pending: rebuild
    assert index.wait_for_graph(TIMEOUT)
    assert index._graph is not graph and index._graph is not None
    assert index._graph.rows == N - 30 + 30
    index.close()


@pytest.mark.parametrize("storage", list(VectorStorage))
def test_each_storage_kind_finds_neighbours_with_exact_scores(
    storage: VectorStorage, tmp_path: Path
) -> None:
    rng = np.random.default_rng(5)
    vectors = unit(rng, 3_000, dim=32)
    ids = [f"d{i}" for i in range(3_000)]
    index = FaissIndex(32, hnsw_threshold=0, storage=storage, build_delay_s=0)
    index.add(ids, vectors)
    assert index.wait_for_graph(TIMEOUT) and index.kind is IndexKind.HNSW
    queries = unit(rng, 50, dim=32)
    found = 0
    for q in queries:
        truth = np.argsort(-(vectors @ q), kind="stable")[:10]
        hits = index.search(q, 10)
        found += len({f"d{i}" for i in truth} & {d for d, _ in hits})
        for doc_id, score in hits:  # re-ranked: scores are the exact inner products
            assert score == pytest.approx(float(vectors[int(doc_id[1:])] @ q), abs=1e-5)
    assert found / 500 >= 0.9
    before = [index.search(q, 10) for q in queries[:10]]
    path = tmp_path / "v.faiss"
    index.save(path)
    # saved, an SQ8 index reads its float vectors from the file instead of memory
    assert isinstance(index._store.base, np.memmap) is (storage is VectorStorage.SQ8)
    loaded = FaissIndex.load(path)
    assert loaded.storage is storage and loaded.kind is IndexKind.HNSW
    for q, hits in zip(queries[:10], before, strict=True):
        assert loaded.search(q, 10) == index.search(q, 10) == hits
    index.close()
    loaded.close()


def test_sq8_keeps_a_quarter_of_the_bytes_in_the_graph(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    vectors = unit(rng, 2_000, dim=64)
    sizes = {}
    for storage in VectorStorage:
        index = FaissIndex(64, hnsw_threshold=0, storage=storage, build_delay_s=0)
        index.add([f"d{i}" for i in range(2_000)], vectors)
        assert index.wait_for_graph(TIMEOUT)
        graph = index._graph
        assert graph is not None
        codes = graph.inner.storage.sa_code_size()
        sizes[storage] = int(codes)
        index.close()
    assert sizes[VectorStorage.FLOAT32] == 4 * sizes[VectorStorage.SQ8] == 4 * 64


def test_large_sections_are_verified_after_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vectors = unit(np.random.default_rng(7), 500)
    index = FaissIndex(DIM)
    index.add([f"d{i}" for i in range(500)], vectors)
    path = tmp_path / "v.faiss"
    index.save(path)
    monkeypatch.setattr(dense.index_file, "VERIFY_AT_OPEN_BYTES", 0)
    good = FaissIndex.load(path)
    assert good.wait_for_graph(TIMEOUT) and good.damaged is None
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0xFF  # inside the vectors
    path.write_bytes(bytes(data))
    bad = FaissIndex.load(path)  # opens (the vectors are mapped, not read) ...
    assert bad.wait_for_graph(TIMEOUT)
    assert isinstance(bad.damaged, FaissIndexCorrupt)  # ... and the check reports it
    monkeypatch.undo()
    with pytest.raises(FaissIndexCorrupt):
        FaissIndex.load(path)  # small files are verified at once


def test_a_build_waits_for_writes_to_pause_and_close_ends_the_wait() -> None:
    rng = np.random.default_rng(8)
    index = FaissIndex(DIM, hnsw_threshold=THRESHOLD, build_delay_s=3_600)
    builder = index._builder
    sleeping = threading.Event()
    sleep = builder.sleep

    def noted_sleep(seconds: float) -> bool:
        sleeping.set()
        return sleep(seconds)

    builder.sleep = noted_sleep  # type: ignore[method-assign]
    index.add([f"d{i}" for i in range(N)], unit(rng, N))
    assert sleeping.wait(TIMEOUT)  # the builder is waiting out the hour ...
    assert index.graph_pending and kind_of(index) is IndexKind.FLAT
    index.build_delay_s = 0.0  # ... and a shorter delay reaches it: no write, no request
    assert index.wait_for_graph(30) and kind_of(index) is IndexKind.HNSW
    index.build_delay_s = 3_600.0
    index.remove([f"d{i}" for i in range(200)])  # below the threshold: the graph goes
    index.add([f"e{i}" for i in range(200)], unit(rng, 200))  # due again, waiting
    waiting = index._builder.thread
    assert waiting is not None and kind_of(index) is IndexKind.FLAT
    index.close()  # ends the wait at once (a broken close would hang here for an hour)
    assert not waiting.is_alive()


def test_sq8_conversion_on_load_keeps_the_links(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    vectors = unit(rng, 2_000, dim=32)
    index = FaissIndex(32, hnsw_threshold=0, build_delay_s=0)
    index.add([f"d{i}" for i in range(2_000)], vectors)
    assert index.wait_for_graph(TIMEOUT)
    path = tmp_path / "v.faiss"
    index.save(path)
    index.close()
    sq8 = FaissIndex.load(path, storage=VectorStorage.SQ8)
    assert sq8.storage is VectorStorage.SQ8 and kind_of(sq8) is IndexKind.HNSW
    assert not sq8.graph_pending  # converted, not rebuilt
    for i in (0, 999, 1_999):
        ((top, score),) = sq8.search(vectors[i], 1)
        assert top == f"d{i}" and score == pytest.approx(1.0, abs=1e-5)
    sq8.save(tmp_path / "sq8.faiss")
    again = FaissIndex.load(tmp_path / "sq8.faiss")
    assert again.storage is VectorStorage.SQ8 and kind_of(again) is IndexKind.HNSW
    q = unit(rng, 1, dim=32)[0]
    assert again.search(q, 10) == sq8.search(q, 10)
