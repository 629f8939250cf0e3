"""What a ``FaissIndex`` writes to its file, and the graph it serves after reading one.

The file format itself is ``dense.index_file``; this module decides what goes in: with
a graph, the base rows it covers (retired ones too) and the live tail, labels as they
are in memory (compacted at the graph's install, ``dense._vector_store``); without one,
every live row as base, compacted here if removed ids outnumber the live ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dense._graph import Graph, GraphParams, VectorStorage, quantised
from dense._id_table import IdTable
from dense._vector_store import RowsView, VectorStore
from dense.index_file import FaissIndexCorrupt, IndexSnapshot


def snapshot_to_save(
    store: VectorStore,
    graph: Graph | None,
    params: dict[str, Any],
    storage: VectorStorage,
) -> IndexSnapshot:
    """A snapshot of ``store`` as views of its arrays (call under the index's lock and
    write it before releasing it)."""
    if graph is None:  # every live row as base, compacted
        live = store.live_labels()
        ids, labels = saved_ids(store.ids, live)
        return IndexSnapshot(
            dimension=store.dimension,
            ids=ids,
            base_labels=labels,
            base_alive=np.ones(live.shape[0], dtype=np.bool_),
            base_vectors=RowsView(store, store.rows_of(live)),  # type: ignore[arg-type]
            tail_labels=np.zeros(0, dtype=np.int64),
            tail_vectors=np.zeros((0, store.dimension), dtype=np.float32),
            params=params,
            storage=storage,
        )
    tail_rows = np.flatnonzero(store.tail_alive)
    return IndexSnapshot(
        dimension=store.dimension,
        ids=store.ids.tolist(),
        base_labels=store.base_labels,
        base_alive=store.base_alive,
        base_vectors=store.base,
        tail_labels=store.tail_labels[tail_rows],
        tail_vectors=RowsView(store, store.base_rows + tail_rows),  # type: ignore[arg-type]
        params=params,
        storage=graph.storage,
        graph=graph,
    )


def saved_ids(
    table: IdTable, live: npt.NDArray[np.int64]
) -> tuple[list[str], npt.NDArray[np.int64]]:
    """The id table and row labels a save without a graph writes for the ``live``
    labels. Between compactions the table in memory keeps the ids of retired rows, so
    once those outnumber live ones the file gets only the live ids, relabelled
    ``0..n-1`` in row order: the table does not grow across restarts. Nothing outside a
    file holds its labels — whoever loads it builds a new index (a new ``identity``;
    allow-lists of another index are refused) and follows writes by string id — and
    without a graph the file holds labels only beside its own rows."""
    if len(table) - int(live.shape[0]) <= int(live.shape[0]):
        return table.tolist(), live
    return [table[label] for label in live.tolist()], np.arange(live.shape[0], dtype=np.int64)


def graph_to_serve(
    graph: Graph | None, store: VectorStore, m: int, ef_construction: int, storage: VectorStorage
) -> Graph | None:
    """The loaded ``graph`` as the index serves it with ``storage``: as saved, quantised
    from float32 to sq8 on the spot (its links are kept), or ``None`` for any other
    change (the index then builds a new graph in the background)."""
    if graph is None or graph.storage is storage:
        return graph
    if storage is VectorStorage.SQ8:
        return quantised(graph, store.base, GraphParams(m, ef_construction, storage))
    return None


def restore_store(store: VectorStore, snap: IndexSnapshot, path: str | Path) -> None:
    """Load a read snapshot into an empty ``store``; ``FaissIndexCorrupt`` if its parts
    disagree (a label outside the id table, sections of different lengths)."""
    try:
        store.restore(
            snap.ids,
            snap.base_vectors,
            snap.base_labels,
            snap.base_alive,
            snap.tail_vectors,
            snap.tail_labels,
            snap.keepalive,
            snap.base_reader,
        )
    except ValueError as exc:
        raise FaissIndexCorrupt(f"{path}: {exc}") from exc
