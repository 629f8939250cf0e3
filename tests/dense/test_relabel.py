"""What a relabel (a compaction of the id table) costs, and what it keeps alive.

Allow-lists compiled before a compaction translate with the compaction's old-to-new
label array, not by looking each id up again (that took 0.5 s for 200,000 ids, under
the index lock); an install gives rows written during the build their new labels the
same way; a list holds its labelling, not the id table, so a dropped index frees its
table, and a list that missed several compactions holds one old table, not one per
compaction.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest

from dense import AllowList, FaissIndex, VectorStorage
from dense._id_table import IdTable
from dense._vector_store import VectorStore
from tests.support.unit_vectors import unit_vectors

DIM = 8


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    return unit_vectors(rng, n, DIM)


class _Lookups:
    """Counts per-id lookups of any ``IdTable`` (``get`` and ``table[label]``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        get, item = IdTable.get, IdTable.__getitem__

        def counted_get(table: IdTable, doc_id: str) -> int | None:
            self.calls += 1
            return get(table, doc_id)

        def counted_item(table: IdTable, label: int) -> str:
            self.calls += 1
            return item(table, label)

        monkeypatch.setattr(IdTable, "get", counted_get)
        monkeypatch.setattr(IdTable, "__getitem__", counted_item)


def _flat_index(rng: np.random.Generator, n: int) -> tuple[FaissIndex, list[str]]:
    index = FaissIndex(DIM, hnsw_threshold=10**9)
    ids = [f"doc-{i:05d}" for i in range(n)]
    index.add(ids, unit(rng, n))
    return index, ids


def _allowed(index: FaissIndex, allow: Any, n: int) -> set[str]:
    return {doc_id for doc_id, _ in index.search(unit(np.random.default_rng(0), 1)[0], n, allow)}


def _compile(index: FaissIndex, allow: AllowList) -> None:
    store = index._store
    with index._lock.read():
        allow.compiled(index._owner, store.ids, store.eras.current)


def test_a_stale_allow_list_translates_without_a_lookup_per_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(1)
    index, ids = _flat_index(rng, 4_000)
    allow = index.allow_list(ids[1_000:])
    index.remove(ids[:2_100])  # retired outnumber live: a compaction relabels
    assert len(index._store.ids) == 1_900
    lookups = _Lookups(monkeypatch)
    _compile(index, allow)
    assert lookups.calls < 50  # was a decode and a lookup per label: 6,000
    index.add(ids[1_000:1_010], unit(rng, 10))  # ids the compaction dropped, back
    _compile(index, allow)
    assert lookups.calls < 100  # the ids added since are read, not every pending one
    monkeypatch.undo()
    assert _allowed(index, allow, 4_000) == set(ids[2_100:]) | set(ids[1_000:1_010])


def test_a_list_that_missed_compactions_holds_one_old_table() -> None:
    rng = np.random.default_rng(2)
    index, ids = _flat_index(rng, 3_000)
    keep = ids[-10:]
    allow = index.allow_list([*ids[:10], *keep])
    first = weakref.ref(index._store.ids)
    live, between = ids, []
    for round_ in range(3):  # three compactions the list never sees
        fresh = [f"r{round_}-{i}" for i in range(1_100)]
        junk = [f"j{round_}-{i}" for i in range(200)]
        index.add([*fresh, *junk], unit(rng, 1_300))
        index.remove([*[d for d in live if d not in keep], *junk])
        live = [*keep, *fresh]
        assert len(index._store.ids) == len(live)  # compacted
        between.append(weakref.ref(index._store.ids))
    del between[-1]  # the current table
    gc.collect()
    era = allow._state.era
    assert era.next is not None and era.next.to is index._store.eras.current  # composed
    assert first() is era.next.table  # the one table it needs; those between are gone
    assert all(table() is None for table in between)
    assert _allowed(index, allow, 3_000) == set(keep)
    del era
    gc.collect()
    assert first() is None  # translated: the old table is freed
    index.add(ids[:3], unit(rng, 3))  # a dropped id added again is admitted again
    assert _allowed(index, allow, 3_000) == {*keep, *ids[:3]}


def test_an_allow_list_does_not_keep_a_dropped_index_table() -> None:
    index, ids = _flat_index(np.random.default_rng(3), 1_000)
    allow = index.allow_list(ids[:10])
    table = weakref.ref(index._store.ids)
    index.close()
    del index
    gc.collect()
    assert table() is None
    assert len(allow) == 10


def test_install_labels_rows_written_during_the_build_without_a_lookup_per_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(4)
    store = VectorStore(DIM)
    store.upsert([f"base-{i}" for i in range(500)], unit(rng, 500))
    store.remove([f"base-{i}" for i in range(100)])
    plan = store.plan()
    base = np.concatenate([block for block, _ in plan.chunks(128)])
    ids = plan.new_ids()
    during = [f"during-{i}" for i in range(2_000)]
    store.upsert(during, unit(rng, 2_000))  # new ids, while the build ran
    store.upsert(["base-200", "base-5"], unit(rng, 2))  # a planned id; a dropped one
    store.remove(["during-7", "base-300"])
    lookups = _Lookups(monkeypatch)
    store.install(plan, base, None, ids)
    assert lookups.calls == 0  # was a decode and a lookup per row written since: 2,002
    monkeypatch.undo()
    expected = {f"base-{i}" for i in range(100, 500)} - {"base-300"}
    expected |= {"base-5", *during} - {"during-7"}
    assert set(store.stored_ids()) == expected
    assert store.ids.get("base-200") == plan.ids.get("base-200") - 100  # plan position
    for doc_id in ("base-5", "during-0", "during-1999", "base-200"):
        label = store.ids.get(doc_id)
        assert label is not None and store.ids[label] == doc_id
        assert store.contains(doc_id)
    assert not store.contains("during-7") and not store.contains("base-300")


def test_the_build_parameters_are_the_builders() -> None:
    rng = np.random.default_rng(5)
    index = FaissIndex(DIM, hnsw_threshold=10**6, build_delay_s=0)
    try:
        index.add([f"d{i}" for i in range(100)], unit(rng, 100))
        index.hnsw_threshold, index.hnsw_m, index.ef_construction = 0, 8, 20
        index.storage = "sq8"  # type: ignore[assignment]  # a name, as the constructor takes
        assert index.storage is VectorStorage.SQ8
        # Review: these went to the builder unchecked; a string storage broke its next
        # build (after the swap, skipping ``on_graph``) and ``save``.
        bad_values = (
            ("hnsw_m", 0),
            ("hnsw_threshold", "5"),
            ("storage", 8),
            ("build_delay_s", float("nan")),  # review: a waiting builder spun on NaN
            ("build_delay_s", float("inf")),  # ... and its thread died on infinity
            ("build_delay_s", -5),
        )
        for name, bad in bad_values:
            with pytest.raises(ValueError, match=name):
                setattr(index, name, bad)
        assert index._params() == {
            "hnsw_threshold": 0,
            "hnsw_m": 8,
            "ef_construction": 20,
            "ef_search": 128,
            "exact_filter_limit": 2_048,
            "storage": "sq8",
        }
        index.add(["x"], unit(rng, 1))  # a write: the new threshold applies
        assert index.wait_for_graph(120) and index.kind.value == "hnsw"
        graph = index._graph
        assert graph is not None and graph.storage is VectorStorage.SQ8
        assert graph.inner.hnsw.nb_neighbors(1) == 8  # hnsw_m links above layer 0
    finally:
        index.close()
