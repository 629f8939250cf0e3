"""A small index that keeps being updated stays small: without a graph (below
``hnsw_threshold``) replaced and removed rows are compacted once they outnumber the live
ones, and the ids no row refers to any more leave the id table (the rows kept are
relabelled); a save without a graph drops removed ids once they outnumber live ones, so
the id table of the file does not grow across restarts either. Neither disturbs
concurrent searches, allow-lists or a background build."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dense._policy
import dense._upkeep
from dense import FaissIndex, IndexKind
from dense._policy import COMPACT_MIN
from dense.index_file import read_snapshot
from tests.support.unit_vectors import unit_vectors

DIM = 16
LIVE = 20
TIMEOUT = 120.0


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    return unit_vectors(rng, n, dim)


def rows_held(index: FaissIndex) -> int:
    store = index._store
    return store.base_rows + store.tail_size


def retired(index: FaissIndex) -> int:
    return rows_held(index) - len(index)


def tail_capacity(index: FaissIndex) -> int:
    return int(index._store._tail.shape[0])


def exact(model: dict[str, np.ndarray], query: np.ndarray, k: int) -> list[str]:
    ids = list(model)
    scores = np.stack([model[i] for i in ids]) @ query
    order = sorted(range(len(ids)), key=lambda i: (-scores[i], ids[i]))
    return [ids[i] for i in order[:k]]


# Bounds with the fix: retired rows stay below max(COMPACT_MIN, live + 1) after every
# write; the tail's capacity at most doubles what it holds.
MAX_ROWS = LIVE + COMPACT_MIN
MAX_CAPACITY = 2 * MAX_ROWS


def test_updating_the_same_documents_does_not_grow_the_index() -> None:
    rng = np.random.default_rng(0)
    index = FaissIndex(DIM)  # threshold 50,000: never a graph here
    ids = [f"d{i}" for i in range(LIVE)]
    model = dict(zip(ids, unit(rng, LIVE), strict=True))
    index.add(ids, np.stack(list(model.values())))
    allow = index.allow_list(ids[:5])  # compiled before any compaction
    try:
        for _round in range(200):  # 4,000 replacements (4,020 rows held before the fix)
            vectors = unit(rng, LIVE)
            index.add(ids, vectors)
            model.update(zip(ids, vectors, strict=True))
            assert rows_held(index) <= MAX_ROWS
            assert tail_capacity(index) <= MAX_CAPACITY
        assert len(index) == LIVE and sorted(index.ids()) == sorted(ids)
        assert retired(index) < COMPACT_MIN
        for q in unit(rng, 5):
            assert [d for d, _ in index.search(q, 10)] == exact(model, q, 10)
            only = {d: model[d] for d in ids[:5]}
            assert [d for d, _ in index.search(q, 10, allow=allow)] == exact(only, q, 10)
        assert len(index._store.ids) == LIVE  # replacing keeps one label per id
    finally:
        index.close()


def test_add_and_delete_churn_does_not_grow_the_rows() -> None:
    rng = np.random.default_rng(1)
    index = FaissIndex(DIM)
    ids = [f"d{i}" for i in range(LIVE)]
    model = dict(zip(ids, unit(rng, LIVE), strict=True))
    index.add(ids, np.stack(list(model.values())))
    try:
        for r in range(100):  # 5,000 ids added and removed (9,020 rows held before)
            fresh = [f"tmp-{r}-{j}" for j in range(50)]
            index.add(fresh, unit(rng, 50))
            assert index.remove(fresh) == 50
            assert rows_held(index) <= MAX_ROWS
            assert tail_capacity(index) <= MAX_CAPACITY
        assert len(index) == LIVE and sorted(index.ids()) == sorted(ids)
        for q in unit(rng, 5):
            assert [d for d, _ in index.search(q, 5)] == exact(model, q, 5)
        for r in (0, 99):  # removed ids stay gone, and come back when added again
            assert f"tmp-{r}-0" not in index
        index.add(["tmp-0-0"], unit(rng, 1))
        assert "tmp-0-0" in index and len(index) == LIVE + 1
    finally:
        index.close()


def test_a_compaction_frees_the_tail_and_the_ids_no_row_holds() -> None:
    rng = np.random.default_rng(2)
    index = FaissIndex(DIM)
    ids = [f"d{i}" for i in range(LIVE)]
    model = dict(zip(ids, unit(rng, LIVE), strict=True))
    index.add(ids, np.stack(list(model.values())))
    allow = index.allow_list([*ids[:5], "gone", "later"])  # compiled before any compaction
    index.add(["gone"], unit(rng, 1))
    index.remove(["gone"])
    layout = index._layout
    try:
        for _round in range(60):  # 1,200 replacements: at least one compaction
            vectors = unit(rng, LIVE)
            index.add(ids, vectors)
            model.update(zip(ids, vectors, strict=True))
        assert index._layout > layout  # compacted (a build planned before would replan)
        assert sorted(index._store.ids.tolist()) == sorted(ids)  # "gone" left the table
        assert rows_held(index) <= MAX_ROWS
        for q in unit(rng, 3):  # the allow-list translated itself to the new labels
            want = exact({d: model[d] for d in ids[:5]}, q, 5)
            assert [d for d, _ in index.search(q, 5, allow=allow)] == want
        later = unit(rng, 1)  # an id unknown to both tables still resolves once added
        index.add(["later"], later)
        ((top, _score),) = index.search(later[0], 1, allow=allow)
        assert top == "later"
        index.remove(ids)
        index.add(["x"], unit(rng, 1))
        for _round in range(60):
            index.add(["x"], unit(rng, 1))
        assert len(index) == 2 and rows_held(index) <= 2 + COMPACT_MIN
    finally:
        index.close()


def test_searches_during_compactions_see_whole_states() -> None:
    """Compaction runs under the write lock; searches hold the read lock throughout, so
    each sees the rows before or after it, never a mix."""
    rng = np.random.default_rng(3)
    index = FaissIndex(DIM)
    query = unit(rng, 1)[0]
    anchors = [f"a{i}" for i in range(5)]
    near = query + 0.05 * unit(rng, 5)  # scores ~0.99 with the query
    near /= np.linalg.norm(near, axis=1, keepdims=True)
    index.add(anchors, near)
    churn = [f"c{i}" for i in range(LIVE)]
    far = -query + 0.3 * unit(rng, LIVE)  # scores below zero
    index.add(churn, far)
    scores = (near @ query).tolist()
    want = [d for _, d in sorted(zip(scores, anchors, strict=True), reverse=True)]
    allow = index.allow_list([anchors[1], anchors[3], *churn])
    stop = threading.Event()
    failures: list[Any] = []

    def reader() -> None:
        while not stop.is_set():
            top = [d for d, _ in index.search(query, 5)]
            if top != want:
                failures.append(top)
            some = [d for d, _ in index.search(query, 4, allow=allow)]
            if some[:2] != [d for d in want if d in (anchors[1], anchors[3])]:
                failures.append(some)
            if len(some) != 4 or not set(some[2:]) <= set(churn):
                failures.append(some)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    layout = index._layout
    try:
        for _round in range(120):  # 2,400 replacements: two compactions or more
            index.add(churn, -query + 0.3 * unit(rng, LIVE))
    finally:
        stop.set()
        for t in threads:
            t.join(TIMEOUT)
        index.close()
    assert index._layout >= layout + 2
    assert failures == []


class _Builds:
    """What ``build_graph`` was asked to build, by which index: its caller's ``self``
    (the index's ``GraphUpkeep``).
    Builder threads of indexes other tests left behind in this process call the same
    function, and must neither count nor wake a test up."""

    def __init__(self) -> None:
        self._seen: list[tuple[object, int]] = []
        self._changed = threading.Condition()

    def note(self, owner: object, size: int) -> None:
        with self._changed:
            self._seen.append((owner, size))
            self._changed.notify_all()

    def sizes(self, index: FaissIndex) -> list[int]:
        with self._changed:
            return [size for owner, size in self._seen if owner is index._upkeep]

    def wait_for(self, index: FaissIndex, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: bool(self.sizes(index)), timeout)


def _counting_builds(monkeypatch: pytest.MonkeyPatch) -> _Builds:
    """Make ``build_graph`` note each plan it is given, and by which index."""
    builds = _Builds()
    build = dense._upkeep.build_graph

    def counted(plan: Any, *args: Any) -> Any:
        builds.note(sys._getframe(1).f_locals.get("self"), len(plan))
        return build(plan, *args)

    monkeypatch.setattr(dense._upkeep, "build_graph", counted)
    return builds


def test_no_compaction_voids_a_build_above_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above the threshold the running build's ``install`` compacts; compacting under it
    would make it plan again, so churn during a build leaves the rows alone."""
    builds = _counting_builds(monkeypatch)
    gate = threading.Event()
    rng = np.random.default_rng(4)
    index = FaissIndex(DIM, hnsw_threshold=300, build_gate=gate, build_delay_s=0)
    ids = [f"d{i}" for i in range(400)]
    model = dict(zip(ids, unit(rng, 400), strict=True))
    index.add(ids, np.stack(list(model.values())))
    try:
        assert builds.wait_for(index, TIMEOUT)  # held inside build_graph by the gate
        layout = index._layout
        hot = ids[:LIVE]
        for _round in range(60):  # 1,200 retired rows > 400 live
            vectors = unit(rng, LIVE)
            index.add(hot, vectors)
            model.update(zip(hot, vectors, strict=True))
        assert index._layout == layout and retired(index) >= 1_200
        gate.set()
        assert index.wait_for_graph(TIMEOUT)
        assert index.kind is IndexKind.HNSW
        assert builds.sizes(index) == [400]  # the first build installed: no plan again
        for doc_id in ("d0", "d5", "d200"):
            ((top, _score),) = index.search(model[doc_id], 1)
            assert top == doc_id
    finally:
        index.close()


def test_a_build_planned_before_a_compaction_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Removals take the index below the threshold while a build holds an older plan;
    churn then compacts, and the stale plan must not be installed over the new rows."""
    builds = _counting_builds(monkeypatch)
    gate = threading.Event()
    rng = np.random.default_rng(5)
    index = FaissIndex(DIM, hnsw_threshold=300, build_gate=gate, build_delay_s=0)
    ids = [f"d{i}" for i in range(400)]
    model = dict(zip(ids, unit(rng, 400), strict=True))
    index.add(ids, np.stack(list(model.values())))
    try:
        assert builds.wait_for(index, TIMEOUT)
        gone = ids[LIVE:]
        index.remove(gone)
        for doc_id in gone:
            del model[doc_id]
        layout = index._layout
        hot = ids[:LIVE]
        for _round in range(60):
            vectors = unit(rng, LIVE)
            index.add(hot, vectors)
            model.update(zip(hot, vectors, strict=True))
        assert index._layout > layout and rows_held(index) <= MAX_ROWS
        gate.set()
        assert index.wait_for_graph(TIMEOUT)
        assert index.kind is IndexKind.FLAT and builds.sizes(index) == [400]
        assert len(index) == LIVE and rows_held(index) <= MAX_ROWS
        for q in unit(rng, 5):
            assert [d for d, _ in index.search(q, 10)] == exact(model, q, 10)
    finally:
        index.close()


# ------------------------------------------------------------------------ saved files


def test_a_save_without_a_graph_drops_removed_ids(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    path = tmp_path / "vectors.faiss"
    index = FaissIndex(DIM)
    ids = [f"d{i}" for i in range(LIVE)]
    model = dict(zip(ids, unit(rng, LIVE), strict=True))
    index.add(ids, np.stack(list(model.values())))
    allow = index.allow_list(ids[:3])
    for phase in range(3):  # each phase opens the last file: ids must not pile up
        for r in range(100):
            fresh = [f"p{phase}-{r}-{j}" for j in range(50)]
            index.add(fresh, unit(rng, 50))
            index.remove(fresh)
        # In memory, ids of removed rows stay until a compaction (one per 1,024+ rows).
        held = len(index._store.ids)
        assert held <= LIVE + COMPACT_MIN + 50
        index.save(path)
        snap, _verification = read_snapshot(path)
        assert len(snap.ids) == LIVE and sorted(snap.ids) == sorted(ids)
        assert snap.base_labels.tolist() == list(range(LIVE))
        assert len(index._store.ids) == held  # the running index is unchanged
        for q in unit(rng, 3):  # and so are its allow-lists
            want = exact({d: model[d] for d in ids[:3]}, q, 3)
            assert [d for d, _ in index.search(q, 3, allow=allow)] == want
        loaded = FaissIndex.load(path)
        try:
            assert len(loaded._store.ids) == LIVE and sorted(loaded.ids()) == sorted(ids)
            for q in unit(rng, 5):
                assert [d for d, _ in loaded.search(q, 10)] == exact(model, q, 10)
            with pytest.raises(ValueError, match="different FaissIndex"):
                loaded.search(unit(rng, 1)[0], 3, allow=allow)  # labels never cross files
            fresh_allow = loaded.allow_list(ids[:3])
            q = unit(rng, 1)[0]
            want = exact({d: model[d] for d in ids[:3]}, q, 3)
            assert [d for d, _ in loaded.search(q, 3, allow=fresh_allow)] == want
        finally:
            loaded.close()
        index.close()
        index = FaissIndex.load(path)
        allow = index.allow_list(ids[:3])
    index.close()


def test_a_save_keeps_the_id_table_while_removed_ids_are_few(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    path = tmp_path / "vectors.faiss"
    index = FaissIndex(DIM)
    ids = [f"d{i}" for i in range(LIVE)]
    index.add(ids, unit(rng, LIVE))
    index.remove(ids[:5])
    index.add(["late"], unit(rng, 1))
    try:
        index.save(path)
        snap, _verification = read_snapshot(path)
        assert snap.ids == [*ids, "late"]  # every label as it was
        assert sorted(snap.base_labels.tolist()) == [*range(5, LIVE + 1)]
    finally:
        index.close()


def test_updates_of_a_few_documents_rebuild_a_graph_in_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a graph, a rebuild came due on live tail rows only: 20 documents updated over
    and over retired every row they appended, and the tail grew for good (400 live rows,
    6,000 tail rows, no rebuild due). Retired tail rows count now, so a build's install
    compacts them."""
    monkeypatch.setattr(dense._policy, "REBUILD_MIN", 200)
    rng = np.random.default_rng(5)
    index = FaissIndex(DIM, hnsw_threshold=300, build_delay_s=0)
    ids = [f"d{i}" for i in range(400)]
    model = dict(zip(ids, unit(rng, 400), strict=True))
    index.add(ids, np.stack(list(model.values())))
    try:
        assert index.wait_for_graph(TIMEOUT)
        hot = ids[:LIVE]
        for _round in range(30):  # 600 rows appended to the tail, 580 of them retired
            vectors = unit(rng, LIVE)
            index.add(hot, vectors)
            model.update(zip(hot, vectors, strict=True))
        assert index.wait_for_graph(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while index._store.tail_size >= 200 and time.monotonic() < deadline:
            threading.Event().wait(0.05)  # the rebuild plans, builds and installs
        assert index._store.tail_size < 200
        for doc_id in ("d0", "d7", "d300"):
            ((top, _score),) = index.search(model[doc_id], 1)
            assert top == doc_id
    finally:
        index.close()
