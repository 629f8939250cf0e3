"""The source of truth behind a ``FaissIndex``: labels and the unit vectors.

Labels. Every string id gets an int64 label the first time it is seen, and keeps it
(removed, replaced, added again) until the next compaction. A compaction — a finished
graph build's ``install``, or ``unseal`` without a graph — *relabels*: the rows it keeps
get labels ``0..n-1`` in row order, and the id table is rebuilt holding only the ids some
row still refers to. So the table holds at most the rows held (live ones, plus retired
ones until the next compaction) instead of every id ever added: a corpus that keeps
replacing documents under new ids no longer grows it. Labels are therefore valid only
against the ``IdTable`` object they came from. Each compaction also records how old
labels map to new ones (``dense._relabel``), which a compiled allow-list follows to
translate itself with one numpy gather (``dense.allow_list``).

Rows. Vectors live in two segments numbered as one: the *base* rows ``[0, B)`` are sealed
— never moved or rewritten, so an HNSW graph can use them as its own storage and a saved
file can be memory-mapped — and the *tail* rows ``[B, B + T)`` were appended since.
Replacing a vector appends a new row and *retires* the old one; removing retires it.
Retired rows stay where they are until the next ``install`` (a finished graph build)
compacts them away, or — with no graph — until ``unseal`` folds the live rows into a
fresh, exactly sized tail (the index does so once retired rows outnumber live ones).
Rows never change once written (compaction writes new arrays, and a new id table), so a
builder holding a ``SealPlan`` may read them, and its copy of the table, without the
index lock.

Not thread-safe otherwise: the owning index holds its lock around every other call.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dense._id_table import IdTable
from dense._relabel import Eras
from dense._row_reader import RowReader

Vectors = npt.NDArray[np.float32]
Labels = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class SealPlan:
    """The live rows at one moment, in the order a build inserts them (base, then tail).

    ``labels`` are their labels then, in ``ids``; plan row ``i`` gets label ``i`` at the
    compaction (``chunks`` yields those new labels). ``old_rows`` are their global row
    numbers then; ``install`` uses them to tell which rows were retired while the build
    ran. The arrays referenced here are never written again, and a plan for a build
    holds its own copy of the id table, so the plan is safe to read without a lock.
    """

    base: Vectors
    base_rows: Labels
    tail: Vectors
    tail_rows: Labels
    labels: Labels
    old_rows: Labels
    tail_size: int
    keepalive: object  # whatever owns ``base``'s memory (a graph, a mapped file)
    ids: IdTable  # the table ``labels`` refer to

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def new_ids(self) -> IdTable:
        """The id table after the compaction: plan row ``i``'s id at label ``i``."""
        return self.ids.subset(self.labels)

    def chunks(self, size: int) -> Iterator[tuple[Vectors, Labels]]:
        """``(vectors, new labels)`` pieces of at most ``size`` rows, in plan order."""
        n_base = int(self.base_rows.shape[0])
        for start in range(0, len(self), size):
            stop = min(start + size, len(self))
            parts = []
            if start < n_base:
                parts.append(self.base[self.base_rows[start : min(stop, n_base)]])
            if stop > n_base:
                parts.append(self.tail[self.tail_rows[max(start, n_base) - n_base : stop - n_base]])
            block = parts[0] if len(parts) == 1 else np.vstack(parts)
            yield np.ascontiguousarray(block, dtype=np.float32), np.arange(start, stop)


class VectorStore:
    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.ids = IdTable()  # label -> string id (ids some row refers to), and back
        self.eras = Eras()  # which labelling ``ids`` is, and how older ones map onto it
        self._row_of_label: Labels = np.full(0, -1, dtype=np.int64)  # -1: not stored
        self.base: Vectors = np.zeros((0, dimension), dtype=np.float32)
        self.base_labels: Labels = np.zeros(0, dtype=np.int64)
        self.base_alive: Mask = np.zeros(0, dtype=np.bool_)
        self.base_keepalive: object = None
        self.base_reader: RowReader | None = None  # set while ``base`` is a mapped file
        self.retired_base = 0
        self._tail: Vectors = np.zeros((0, dimension), dtype=np.float32)
        self._tail_labels: Labels = np.zeros(0, dtype=np.int64)
        self._tail_alive: Mask = np.zeros(0, dtype=np.bool_)
        self.tail_size = 0
        self.size = 0  # live rows

    # ------------------------------------------------------------------ inspection
    @property
    def base_rows(self) -> int:
        return int(self.base_labels.shape[0])

    @property
    def tail(self) -> Vectors:
        return self._tail[: self.tail_size]

    @property
    def tail_labels(self) -> Labels:
        return self._tail_labels[: self.tail_size]

    @property
    def tail_alive(self) -> Mask:
        return self._tail_alive[: self.tail_size]

    @property
    def tail_live(self) -> int:
        return self.size - (self.base_rows - self.retired_base)

    @property
    def retired_rows(self) -> int:
        """Rows held but no longer live (replaced or removed), base and tail."""
        return self.base_rows + self.tail_size - self.size

    def contains(self, doc_id: str) -> bool:
        label = self.ids.get(doc_id)
        return label is not None and bool(self._row_of_label[label] >= 0)

    def live_labels(self) -> Labels:
        """Labels of the live rows, in row order."""
        return np.concatenate(
            [self.base_labels[self.base_alive], self.tail_labels[self.tail_alive]]
        )

    def stored_ids(self) -> list[str]:
        return [self.ids[label] for label in self.live_labels().tolist()]

    def rows_of(self, labels: Labels) -> Labels:
        """Global rows of the live vectors among ``labels`` (labels not stored skipped)."""
        labels = labels[labels < self._row_of_label.shape[0]]
        rows = self._row_of_label[labels]
        return rows[rows >= 0]

    def base_row_of(self, labels: Labels) -> Labels:
        """Rows of labels known to be live in the base segment."""
        return self._row_of_label[labels]

    def base_vectors_for_rerank(self, rows: Labels) -> Vectors:
        """Base rows for an SQ8 re-rank: read with ``pread`` when ``base`` is a mapped
        file, so a handful of rows per search does not make the whole map resident
        (``dense._row_reader``); indexed directly otherwise."""
        if self.base_reader is not None:
            return self.base_reader.rows(rows)
        return self.base[rows]

    def vectors_at(self, rows: Labels) -> Vectors:
        """The vectors of global ``rows`` in the given order: a view when they are one
        ascending run inside one segment, else a copy."""
        n = int(rows.shape[0])
        if n and int(rows[-1]) - int(rows[0]) == n - 1 and bool(np.all(np.diff(rows) == 1)):
            first, last = int(rows[0]), int(rows[-1])
            if last < self.base_rows:
                return self.base[first : last + 1]
            if first >= self.base_rows:
                return self._tail[first - self.base_rows : last + 1 - self.base_rows]
        out = np.empty((n, self.dimension), dtype=np.float32)
        in_base = rows < self.base_rows
        out[in_base] = self.base[rows[in_base]]
        out[~in_base] = self._tail[rows[~in_base] - self.base_rows]
        return out

    # --------------------------------------------------------------------- writing
    def upsert(self, ids: list[str], matrix: Vectors) -> None:
        """Append the rows (ids distinct); a stored id's old row is retired."""
        labels = self.ids.add_all(ids)
        self._grow_label_table()
        old = self._row_of_label[labels]
        self._retire(old[old >= 0])
        start = self.tail_size
        self._reserve_tail(start + len(ids))
        stop = start + len(ids)
        self._tail[start:stop] = matrix
        self._tail_labels[start:stop] = labels
        self._tail_alive[start:stop] = True
        self.tail_size = stop
        self._row_of_label[labels] = self.base_rows + np.arange(start, stop, dtype=np.int64)
        self.size += len(ids)

    def remove(self, ids: Iterable[str]) -> list[int]:
        """Retire stored ids (unknown ones ignored); return the removed labels."""
        removed: list[int] = []
        for doc_id in dict.fromkeys(ids):
            label = self.ids.get(doc_id)
            if label is not None and self._row_of_label[label] >= 0:
                removed.append(label)
        if removed:
            labels = np.asarray(removed, dtype=np.int64)
            self._retire(self._row_of_label[labels])
            self._row_of_label[labels] = -1
        return removed

    def _retire(self, rows: Labels) -> None:
        if rows.shape[0] == 0:
            return
        in_base = rows[rows < self.base_rows]
        if in_base.shape[0]:
            if not self.base_alive.flags.writeable:
                self.base_alive = self.base_alive.copy()
            self.base_alive[in_base] = False
            self.retired_base += int(in_base.shape[0])
        self._tail_alive[rows[rows >= self.base_rows] - self.base_rows] = False
        self.size -= int(rows.shape[0])

    # ------------------------------------------------------------- seal / install
    def plan(self, *, for_build: bool = True) -> SealPlan:
        """Snapshot the live rows (copies only the small arrays, and for a build, which
        reads it off the lock while writers add ids, the id table)."""
        base_rows = np.flatnonzero(self.base_alive).astype(np.int64)
        tail_rows = np.flatnonzero(self.tail_alive).astype(np.int64)
        return SealPlan(
            base=self.base,
            base_rows=base_rows,
            tail=self._tail,
            tail_rows=tail_rows,
            labels=np.concatenate([self.base_labels[base_rows], self._tail_labels[tail_rows]]),
            old_rows=np.concatenate([base_rows, self.base_rows + tail_rows]),
            tail_size=self.tail_size,
            keepalive=self.base_keepalive,
            ids=self.ids.copy() if for_build else self.ids,
        )

    def install(self, plan: SealPlan, base: Vectors, keepalive: object, ids: IdTable) -> None:
        """Make ``base`` (the plan's vectors, in plan order) the new base segment, plan
        row ``i`` labelled ``i``, and ``ids`` (``plan.new_ids()``, made off the lock) the
        id table. Rows retired while the build ran stay retired (the graph holds them,
        so their ids stay until the next compaction); the live rows appended since
        become the tail, their ids added to ``ids``; retired ones appended since are
        dropped."""
        n = len(plan)
        if base.shape != (n, self.dimension) or len(ids) != n:
            raise ValueError("the new base does not match the plan")
        alive = self._row_of_label[plan.labels] == plan.old_rows
        keep = plan.tail_size + np.flatnonzero(self.tail_alive[plan.tail_size :])
        tail = self._tail[keep]
        remap = self._remap(plan)
        old_labels = self._tail_labels[keep]
        tail_labels = remap[old_labels]  # planned ids (replaced since) keep their label
        fresh = tail_labels < 0  # ids the plan did not hold: appended to ``ids``
        tail_labels[fresh] = ids.append_from(self.ids, old_labels[fresh])
        remap[old_labels[fresh]] = tail_labels[fresh]
        self._relabel(ids, remap)
        self.base, self.base_labels, self.base_alive = base, np.arange(n, dtype=np.int64), alive
        self.base_keepalive = keepalive
        self.base_reader = None
        self.retired_base = int(n - np.count_nonzero(alive))
        self._tail, self._tail_labels = tail, tail_labels
        self._tail_alive = np.ones(tail.shape[0], dtype=np.bool_)
        self.tail_size = int(tail.shape[0])
        self._row_of_label = np.full(len(ids), -1, dtype=np.int64)
        live_base = np.flatnonzero(alive)
        self._row_of_label[live_base] = live_base  # base row i has label i
        self._row_of_label[tail_labels] = n + np.arange(self.tail_size, dtype=np.int64)

    def unseal(self) -> None:
        """Fold the live rows into a new tail of exactly their number, in row order,
        dropping retired rows and their ids (no graph: nothing needs a sealed base), and
        relabel them ``0..n-1``. The old arrays are left untouched for any plan still
        reading them."""
        plan = self.plan(for_build=False)
        vectors = np.empty((len(plan), self.dimension), dtype=np.float32)
        start = 0
        for block, _labels in plan.chunks(65_536):
            vectors[start : start + block.shape[0]] = block
            start += block.shape[0]
        self._relabel(plan.new_ids(), self._remap(plan))
        self.base = np.zeros((0, self.dimension), dtype=np.float32)
        self.base_labels = np.zeros(0, dtype=np.int64)
        self.base_alive = np.zeros(0, dtype=np.bool_)
        self.base_keepalive = None
        self.base_reader = None
        self.retired_base = 0
        self._tail, self._tail_labels = vectors, np.arange(len(plan), dtype=np.int64)
        self._tail_alive = np.ones(len(plan), dtype=np.bool_)
        self.tail_size = len(plan)
        self._row_of_label = np.arange(len(plan), dtype=np.int64)

    def restore(
        self,
        ids: list[str],
        base: Vectors,
        base_labels: Labels,
        base_alive: Mask,
        tail: Vectors,
        tail_labels: Labels,
        keepalive: object,
        base_reader: RowReader | None = None,
    ) -> None:
        """Load saved state into an empty store; ``ValueError`` if it is inconsistent."""
        table = IdTable(ids)  # ValueError for a duplicate id
        rows_b, rows_t = int(base_labels.shape[0]), int(tail_labels.shape[0])
        if base.shape != (rows_b, self.dimension) or tail.shape != (rows_t, self.dimension):
            raise ValueError("vector sections do not match the label sections")
        if base_alive.shape != (rows_b,):
            raise ValueError("the retired-row mask does not match the base")
        live = np.concatenate([base_labels[base_alive], tail_labels])
        every = np.concatenate([base_labels, tail_labels])
        if every.shape[0] and (every.min() < 0 or every.max() >= len(ids)):
            raise ValueError("row label outside the id table")
        if live.shape[0] and int(np.bincount(live, minlength=len(ids)).max()) > 1:
            raise ValueError("duplicate live labels")
        self.ids = table
        self.eras.restart()
        self._grow_label_table()
        self.base, self.base_labels, self.base_alive = base, base_labels, base_alive
        self.base_keepalive = keepalive
        self.base_reader = base_reader
        self.retired_base = int(rows_b - np.count_nonzero(base_alive))
        self._tail = np.array(tail, dtype=np.float32, order="C")
        self._tail_labels = np.array(tail_labels, dtype=np.int64)
        self._tail_alive = np.ones(rows_t, dtype=np.bool_)
        self.tail_size = rows_t
        self._row_of_label[base_labels[base_alive]] = np.flatnonzero(base_alive)
        self._row_of_label[tail_labels] = rows_b + np.arange(rows_t, dtype=np.int64)
        self.size = int(live.shape[0])

    def _remap(self, plan: SealPlan) -> Labels:
        """Old label -> plan position (its label after the compaction), else -1."""
        remap = np.full(len(self.ids), -1, dtype=np.int64)
        remap[plan.labels] = np.arange(len(plan), dtype=np.int64)
        return remap

    def _relabel(self, ids: IdTable, remap: Labels) -> None:
        self.eras.advance(remap, self.ids, len(ids))
        self.ids = ids

    # ------------------------------------------------------------------- growth
    def _grow_label_table(self) -> None:
        if len(self.ids) > self._row_of_label.shape[0]:
            grown = np.full(max(len(self.ids), 2 * self._row_of_label.shape[0]), -1, np.int64)
            grown[: self._row_of_label.shape[0]] = self._row_of_label
            self._row_of_label = grown

    def _reserve_tail(self, rows: int) -> None:
        if rows <= self._tail.shape[0]:
            return
        cap = max(rows, 2 * self._tail.shape[0], 64)
        tail = np.zeros((cap, self.dimension), dtype=np.float32)
        tail[: self.tail_size] = self.tail
        labels = np.zeros(cap, dtype=np.int64)
        labels[: self.tail_size] = self.tail_labels
        alive = np.zeros(cap, dtype=np.bool_)
        alive[: self.tail_size] = self.tail_alive
        self._tail, self._tail_labels, self._tail_alive = tail, labels, alive


class RowsView:
    """Some rows of a store as an array-like for streaming saves (``shape``, ``dtype``,
    slicing): read a block at a time, so a save never gathers the whole matrix."""

    def __init__(self, store: VectorStore, rows: Labels) -> None:
        self._store = store
        self._rows = rows
        self.shape = (int(rows.shape[0]), store.dimension)
        self.ndim = 2
        self.dtype = np.dtype(np.float32)
        self.nbytes = self.shape[0] * store.dimension * 4

    def __getitem__(self, item: slice) -> Vectors:
        return self._store.vectors_at(self._rows[item])


def unit_rows(vectors: npt.ArrayLike, dimension: int) -> Vectors:
    """``vectors`` as a C-contiguous float32 matrix of unit rows; ``ValueError`` for a
    wrong shape, NaN/infinity or a zero vector."""
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim == 1:
        array = array.reshape(1, -1)
    if array.ndim != 2 or array.shape[1] != dimension:
        raise ValueError(f"expected vectors of dimension {dimension}, got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError("vectors contain NaN or infinity")
    # In float64: a finite float32 row's squared length can overflow float32 (3e19**2),
    # and dividing by an infinite norm would store a zero row.
    norms = np.linalg.norm(array.astype(np.float64), axis=1, keepdims=True)
    if array.shape[0] and (norms <= 1e-12).any():
        raise ValueError("zero vectors have no direction")
    return np.ascontiguousarray(array / norms, dtype=np.float32)
