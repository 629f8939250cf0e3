"""The id table stays the size of the rows held while a corpus has a graph.

Before, every id ever added kept its label for good: a corpus that kept replacing its
documents under new ids grew its id table (in memory and in the file) by every id it had
ever held — rolling 40 live vectors over eight times left 360 ids. Now each graph build
relabels the rows it covers and drops the ids no row refers to, so the table holds at
most the live ids plus those of rows changed since the last graph; searches, allow-lists
compiled before a relabel, rows written during a build and files saved before the change
all keep working.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dense._policy
import dense._upkeep
from dense import AllowList, FaissIndex, IndexKind
from dense._graph import Graph
from dense.index_file import IndexSnapshot, read_snapshot, write_snapshot
from tests.support.unit_vectors import unit_vectors

DIM = 16
LIVE = 40
STEP = 10  # ids rolled over per write: a quarter of the corpus
TIMEOUT = 120.0

Model = dict[str, np.ndarray]


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    return unit_vectors(rng, n, DIM)


def table_size(index: FaissIndex) -> int:
    return len(index._store.ids)


def changed_since_graph(index: FaissIndex) -> int:
    """Rows written (tail) or retired (masked) since the serving graph was built."""
    store = index._store
    return store.tail_size + store.retired_base


def assert_bounded(index: FaissIndex) -> None:
    assert table_size(index) <= len(index) + changed_since_graph(index)


def exact_hits(model: Model, query: np.ndarray, k: int) -> list[tuple[str, float]]:
    ids = sorted(model)
    if not ids:
        return []
    scores = np.stack([model[i] for i in ids]).astype(np.float64) @ query
    order = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))
    return [(ids[i], float(scores[i])) for i in order[:k]]


def assert_exact(
    index: FaissIndex,
    model: Model,
    queries: np.ndarray,
    allow: AllowList | None = None,
    allowed: set[str] | None = None,
) -> None:
    """Same ids in the same order as an exact search over ``model``, same scores."""
    if allowed is not None:
        model = {d: v for d, v in model.items() if d in allowed}
    for q in queries:
        got = index.search(q, 10, allow=allow)
        want = exact_hits(model, q, 10)
        assert [d for d, _ in got] == [d for d, _ in want]
        assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-5)


def roll_over(
    index: FaissIndex, live: deque[str], model: Model, rng: np.random.Generator, fresh: list[str]
) -> None:
    """Add ``fresh`` ids and remove as many of the oldest live ones, in the index and in
    ``live`` and ``model`` alike."""
    gone = [live.popleft() for _ in range(len(fresh))]
    vectors = unit(rng, len(fresh))
    index.add(fresh, vectors)
    index.remove(gone)
    live.extend(fresh)
    model.update(zip(fresh, vectors, strict=True))
    for doc_id in gone:
        del model[doc_id]


def test_rolling_documents_over_keeps_the_id_table_bounded(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(dense._policy, "REBUILD_MIN", STEP)
    rng = np.random.default_rng(0)
    queries = unit(rng, 5)
    index = FaissIndex(DIM, hnsw_threshold=0, build_delay_s=0)
    live: deque[str] = deque(f"g0-{j}" for j in range(LIVE))
    model: Model = dict(zip(live, unit(rng, LIVE), strict=True))
    index.add(list(live), np.stack(list(model.values())))
    path = tmp_path / "vectors.faiss"
    try:
        assert index.wait_for_graph(TIMEOUT) and index.kind is IndexKind.HNSW
        most = table_size(index)
        allowed = {*list(live)[-STEP:], "g2-4-0", "g3-9-9"}  # first ids, and later ones
        allow = index.allow_list(allowed)
        for step in range(8 * LIVE // STEP):  # eight roll-overs under new ids
            roll_over(
                index, live, model, rng, [f"g{step // 4 + 1}-{step}-{j}" for j in range(STEP)]
            )
            most = max(most, table_size(index))
            assert_bounded(index)
            assert_exact(index, model, queries[:2])  # before the next graph
            assert index.wait_for_graph(TIMEOUT)
            assert_bounded(index)
            assert table_size(index) <= LIVE + 2 * STEP
            assert_exact(index, model, queries)  # after it
            assert_exact(index, model, queries, allow, allowed)
        assert most <= LIVE + 2 * STEP  # 360 before: every id ever added
        for _round in range(8):  # the same ids replaced over and over: still exact
            for quarter in range(LIVE // STEP):
                ids = list(live)[quarter * STEP : (quarter + 1) * STEP]
                vectors = unit(rng, STEP)
                index.add(ids, vectors)
                model.update(zip(ids, vectors, strict=True))
                assert_bounded(index)
            assert index.wait_for_graph(TIMEOUT)
            assert table_size(index) == LIVE
            assert_exact(index, model, queries)
        index.save(path)
        snap, _verification = read_snapshot(path)
        assert sorted(snap.ids) == sorted(live)  # the file holds the live ids only
    finally:
        index.close()
    loaded = FaissIndex.load(path, build_delay_s=0)
    try:
        assert loaded.kind is IndexKind.HNSW and table_size(loaded) == LIVE
        assert_exact(loaded, model, queries)
        for step in range(LIVE // STEP):  # and it keeps rolling over after a reopen
            roll_over(loaded, live, model, rng, [f"r-{step}-{j}" for j in range(STEP)])
            assert loaded.wait_for_graph(TIMEOUT)
            assert_bounded(loaded)
            assert_exact(loaded, model, queries)
        assert table_size(loaded) <= LIVE + 2 * STEP
    finally:
        loaded.close()


class _Planned:
    """Set once ``build_graph`` is called for one index (it has planned, and its gate
    now holds it): builder threads other tests left behind call the same function."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.event = threading.Event()
        self.upkeep: object = None
        build = dense._upkeep.build_graph

        def noted(plan: Any, *args: Any) -> Any:
            if sys._getframe(1).f_locals.get("self") is self.upkeep:
                self.event.set()
            return build(plan, *args)

        monkeypatch.setattr(dense._upkeep, "build_graph", noted)


def test_writes_during_a_build_and_allow_lists_survive_the_relabel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A build is held after its plan while rows are replaced, removed, added and added
    then removed; searches run throughout on other threads. Its install relabels every
    row and drops ids: results stay exact, and allow-lists compiled before the plan and
    during the build (against the old labels) translate themselves."""
    monkeypatch.setattr(dense._policy, "REBUILD_MIN", STEP)
    planned = _Planned(monkeypatch)
    gate = threading.Event()
    gate.set()
    rng = np.random.default_rng(1)
    query = unit(rng, 1)[0]
    anchors = [f"anchor{i}" for i in range(5)]  # never written again: a reader's truth
    near = query + 0.05 * unit(rng, 5)
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    ids = [f"d{i}" for i in range(LIVE)]
    far = -query + 0.3 * unit(rng, LIVE)  # scores below zero: never above an anchor
    far /= np.linalg.norm(far, axis=1, keepdims=True)
    model: Model = {**dict(zip(anchors, near, strict=True)), **dict(zip(ids, far, strict=True))}
    index = FaissIndex(DIM, hnsw_threshold=0, build_delay_s=0, build_gate=gate)
    planned.upkeep = index._upkeep
    index.add(list(model), np.stack(list(model.values())))
    scores = (near @ query).tolist()
    order = [d for _, d in sorted(zip(scores, anchors, strict=True), key=lambda p: -p[0])]
    pair = {anchors[1], anchors[3]}
    anchor_allow = index.allow_list([anchors[1], anchors[3], *ids])
    stop = threading.Event()
    failures: list[Any] = []

    def reader() -> None:
        while not stop.is_set():
            top = [d for d, _ in index.search(query, 5)]
            if top != order:
                failures.append(top)
            some = [d for d, _ in index.search(query, 2, allow=anchor_allow)]
            if some != [d for d in order if d in pair]:
                failures.append(some)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    queries = unit(rng, 5)
    try:
        assert index.wait_for_graph(TIMEOUT)
        for t in threads:
            t.start()
        before_ids = [*ids[:10], "new-0", "blip-0"]
        before = index.allow_list(before_ids)  # compiled against the first labels
        table_before = index._store.ids
        gate.clear()
        fresh = [f"roll-{j}" for j in range(STEP)]  # a quarter rolled over: a build is due
        vectors = unit(rng, STEP)
        index.add(fresh, vectors)
        index.remove(ids[-STEP:])
        model.update(zip(fresh, vectors, strict=True))
        for doc_id in ids[-STEP:]:
            del model[doc_id]
        assert planned.event.wait(TIMEOUT)  # planned; held by the gate before the build
        replaced, removed = ids[:5], ids[5:8]
        vectors = unit(rng, 5)
        index.add(replaced, vectors)  # plan rows replaced: their base rows retire
        model.update(zip(replaced, vectors, strict=True))
        index.remove(removed)  # plan rows removed
        for doc_id in removed:
            del model[doc_id]
        new = [f"new-{j}" for j in range(STEP)]
        vectors = unit(rng, STEP)
        index.add(new, vectors)  # ids the plan never saw
        model.update(zip(new, vectors, strict=True))
        index.add(["blip-0", "blip-1"], unit(rng, 2))  # added and gone within the build
        index.remove(["blip-0", "blip-1"])
        vectors = unit(rng, 1)
        index.add(["new-0"], vectors)  # a new id replaced during the build
        model["new-0"] = vectors[0]
        during_ids = [*replaced, *removed, "new-1", "blip-1", ids[20]]
        during = index.allow_list(during_ids)  # against the old labels, still
        assert index._store.ids is table_before
        assert_exact(index, model, queries)
        assert_exact(index, model, queries, before, set(before_ids))
        gate.set()
        assert index.wait_for_graph(TIMEOUT)
        assert index._store.ids is not table_before  # relabelled at least once
        assert_bounded(index)
        assert set(index._store.ids.tolist()) >= set(model)
        assert "blip-0" not in index._store.ids and ids[-1] not in index._store.ids
        assert_exact(index, model, queries)
        assert_exact(index, model, queries, before, set(before_ids))
        assert_exact(index, model, queries, during, set(during_ids))
        vectors = unit(rng, 1)  # an id dropped from the table comes back when re-added
        index.add(["blip-0"], vectors)
        model["blip-0"] = vectors[0]
        assert_exact(index, model, queries, before, set(before_ids))
        ((top, _score),) = index.search(vectors[0], 1, allow=before)
        assert top == "blip-0"
    finally:
        stop.set()
        gate.set()
        for t in threads:
            t.join(TIMEOUT)
        index.close()
    assert failures == []


def test_a_file_saved_with_every_id_ever_added_loads_and_compacts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A file as saved before the change: a graph over labels with gaps, and an id
    table holding the ids of rows long gone. It opens and searches as before; its next
    graph compacts the table."""
    rng = np.random.default_rng(2)
    queries = unit(rng, 5)
    ids = [f"d{i}" for i in range(60)]
    model: Model = dict(zip(ids, unit(rng, 60), strict=True))
    index = FaissIndex(DIM, hnsw_threshold=0, build_delay_s=0)
    index.add(ids, np.stack(list(model.values())))
    try:
        assert index.wait_for_graph(TIMEOUT)
        index.remove(ids[:3])  # retired base rows: masked, kept in the file
        for doc_id in ids[:3]:
            del model[doc_id]
        late = unit(rng, 2)
        index.add(["late-0", "late-1"], late)  # a tail
        model.update(zip(["late-0", "late-1"], late, strict=True))
        path = tmp_path / "new.faiss"
        index.save(path)
    finally:
        index.close()
    old_path = tmp_path / "old.faiss"
    _write_with_dead_ids(path, old_path)
    old, _verification = read_snapshot(old_path)
    assert len(old.ids) > 3 * len(model) and old.base_labels.max() > 3 * 60 - 3

    monkeypatch.setattr(dense._policy, "REBUILD_MIN", 5)
    loaded = FaissIndex.load(old_path, build_delay_s=0)
    try:
        assert loaded.kind is IndexKind.HNSW and table_size(loaded) == len(old.ids)
        assert_exact(loaded, model, queries)
        allow = loaded.allow_list(ids[3:13])
        assert_exact(loaded, model, queries, allow, set(ids[3:13]))
        vectors = unit(rng, 5)
        loaded.add(ids[3:8], vectors)  # enough change for the next graph
        model.update(zip(ids[3:8], vectors, strict=True))
        assert loaded.wait_for_graph(TIMEOUT)
        assert table_size(loaded) == len(model)
        assert_exact(loaded, model, queries)
        assert_exact(loaded, model, queries, allow, set(ids[3:13]))
    finally:
        loaded.close()


def _write_with_dead_ids(path: Path, out: Path) -> None:
    """Rewrite the index file at ``path`` as the old code saved one: label ``3l + 1``
    for label ``l``, and ids that no row refers to at the other labels."""
    from dense._faiss import faiss_module

    faiss = faiss_module()
    snap, _verification = read_snapshot(path)
    assert snap.graph is not None
    n = len(snap.ids)
    ids = [f"dead-{j}" for j in range(3 * n + 1)]
    for label, doc_id in enumerate(snap.ids):
        ids[3 * label + 1] = doc_id
    base_labels = 3 * snap.base_labels + 1
    graph_index = faiss.read_index(str(path))  # a private copy to relabel
    faiss.copy_array_to_vector(base_labels, graph_index.id_map)
    write_snapshot(
        out,
        IndexSnapshot(
            dimension=snap.dimension,
            ids=ids,
            base_labels=base_labels,
            base_alive=snap.base_alive,
            base_vectors=snap.base_vectors,
            tail_labels=3 * snap.tail_labels + 1,
            tail_vectors=snap.tail_vectors,
            params=snap.params,
            storage=snap.storage,
            graph=Graph(graph_index, snap.storage),
        ),
    )
