"""The source of truth behind a ``FaissIndex``: stable labels and the unit vectors.

Labels. Every string id gets an int64 label the first time it is seen; labels are never
reused or reassigned (a removed id keeps its label), so FAISS ids, saved files and
compiled allow-lists agree forever.

Rows. Vectors live in two segments numbered as one: the *base* rows ``[0, B)`` are sealed
— never moved or rewritten, so an HNSW graph can use them as its own storage and a saved
file can be memory-mapped — and the *tail* rows ``[B, B + T)`` were appended since.
Replacing a vector appends a new row and *retires* the old one; removing retires it.
Retired rows stay where they are until the next ``install`` (a finished graph build)
compacts them away, or — with no graph — until ``unseal`` folds the live rows into a
fresh, exactly sized tail (the index does so once retired rows outnumber live ones).
Either way a label keeps its meaning; only row numbers change. Rows never change once
written (compaction writes new arrays), so a builder holding a ``SealPlan`` may read
them without the index lock.

Not thread-safe otherwise: the owning index holds its lock around every other call.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dense._id_table import IdTable
from dense._row_reader import RowReader

Vectors = npt.NDArray[np.float32]
Labels = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

_GATHER_FRACTION = 4  # allow-lists over more than 1/4 of the rows: score all, then mask
_RESCORE_SLACK = 1e-5  # scores this close below the k-th are scored again row by row


@dataclass(frozen=True)
class SealPlan:
    """The live rows at one moment, in the order a build inserts them (base, then tail).

    ``old_rows`` are their global row numbers then; ``install`` uses them to tell which
    rows were retired while the build ran. The arrays referenced here are never written
    again, so the plan is safe to read without a lock.
    """

    base: Vectors
    base_rows: Labels
    tail: Vectors
    tail_rows: Labels
    labels: Labels
    old_rows: Labels
    tail_size: int
    keepalive: object  # whatever owns ``base``'s memory (a graph, a mapped file)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def chunks(self, size: int) -> Iterator[tuple[Vectors, Labels]]:
        """``(vectors, labels)`` pieces of at most ``size`` rows, in plan order."""
        n_base = int(self.base_rows.shape[0])
        for start in range(0, len(self), size):
            stop = min(start + size, len(self))
            parts = []
            if start < n_base:
                parts.append(self.base[self.base_rows[start : min(stop, n_base)]])
            if stop > n_base:
                parts.append(self.tail[self.tail_rows[max(start, n_base) - n_base : stop - n_base]])
            block = parts[0] if len(parts) == 1 else np.vstack(parts)
            yield np.ascontiguousarray(block, dtype=np.float32), self.labels[start:stop]


class VectorStore:
    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.ids = IdTable()  # label -> string id (removed ids included), and back
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

    # ---------------------------------------------------------------------- search
    def exact_top(
        self, query: Vectors, k: int, rows: Labels | None = None, *, tail_only: bool = False
    ) -> tuple[Labels, npt.NDArray[np.float32]]:
        """Exact top-``k`` labels and scores by inner product, best first, among the
        live ``rows`` (``None``: every live row; ``tail_only``: the live tail rows)."""
        q = query[0]
        if rows is not None and rows.shape[0] * _GATHER_FRACTION < max(self.size, 1):
            scores = self.vectors_at(rows) @ q
            labels = self._labels_at(rows)
            return self._settled_top(labels, scores, rows, q, k)
        parts_s: list[npt.NDArray[np.float32]] = []
        parts_l: list[Labels] = []
        if not tail_only and self.base_rows:
            s = self.base @ q
            if self.retired_base:
                s[~self.base_alive] = -np.inf
            parts_s.append(s)
            parts_l.append(self.base_labels)
        if self.tail_size:
            s = self.tail @ q
            s[~self.tail_alive] = -np.inf
            parts_s.append(s)
            parts_l.append(self.tail_labels)
        if not parts_s:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        scores = np.concatenate(parts_s) if len(parts_s) > 1 else parts_s[0]
        labels = np.concatenate(parts_l) if len(parts_l) > 1 else parts_l[0]
        if rows is not None:
            keep = np.zeros(scores.shape[0], dtype=np.bool_)
            keep[rows if not tail_only else rows - self.base_rows] = True
            scores = np.where(keep, scores, -np.inf)
        first_row = self.base_rows if tail_only else 0  # position i scores row first_row + i
        return self._settled_top(labels, scores, None, q, k, first_row)

    def _settled_top(
        self,
        labels: Labels,
        scores: npt.NDArray[np.float32],
        rows: Labels | None,
        q: Vectors,
        k: int,
        first_row: int = 0,
    ) -> tuple[Labels, npt.NDArray[np.float32]]:
        """``top_k``, the scores near the cut computed again row by row first. A matrix
        product rounds a row's score by where the row sits (BLAS works in blocks), so two
        identical vectors could score one ulp apart and rank by insertion order instead
        of by label. ``rows``: the row each position scored (``None``: ``first_row + i``)."""
        finite = scores[np.isfinite(scores)]
        take = min(k, int(finite.shape[0]))
        if take == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        cut = np.partition(finite, finite.shape[0] - take)[finite.shape[0] - take]
        near = np.flatnonzero(scores >= cut - _RESCORE_SLACK)
        at = rows[near] if rows is not None else near + first_row
        exact = np.einsum("ij,j->i", self.vectors_at(at), q)  # each row's own sum
        return top_k(labels[near], exact, k)

    def _labels_at(self, rows: Labels) -> Labels:
        out = np.empty(rows.shape[0], dtype=np.int64)
        in_base = rows < self.base_rows
        out[in_base] = self.base_labels[rows[in_base]]
        out[~in_base] = self._tail_labels[rows[~in_base] - self.base_rows]
        return out

    # ------------------------------------------------------------- seal / install
    def plan(self) -> SealPlan:
        """Snapshot the live rows for a build (copies only the small arrays)."""
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
        )

    def install(self, plan: SealPlan, base: Vectors, keepalive: object) -> None:
        """Make ``base`` (the plan's vectors, in plan order) the new base segment; rows
        retired while the build ran stay retired, rows appended since become the tail."""
        if base.shape != (len(plan), self.dimension):
            raise ValueError("the new base does not match the plan")
        alive = self._row_of_label[plan.labels] == plan.old_rows
        extra = slice(plan.tail_size, self.tail_size)
        tail = self._tail[extra].copy()
        tail_labels = self._tail_labels[extra].copy()
        tail_alive = self._tail_alive[extra].copy()
        self.base, self.base_labels, self.base_alive = base, plan.labels, alive
        self.base_keepalive = keepalive
        self.base_reader = None
        self.retired_base = int(alive.shape[0] - np.count_nonzero(alive))
        self._tail, self._tail_labels, self._tail_alive = tail, tail_labels, tail_alive
        self.tail_size = int(tail.shape[0])
        self._row_of_label[plan.labels[alive]] = np.flatnonzero(alive)
        live_tail = np.flatnonzero(tail_alive)
        self._row_of_label[tail_labels[live_tail]] = self.base_rows + live_tail

    def unseal(self) -> None:
        """Fold the live rows into a new tail of exactly their number, in row order,
        dropping retired rows (no graph: nothing needs a sealed base). Labels are kept;
        the old arrays are left untouched for any plan still reading them."""
        plan = self.plan()
        vectors = np.empty((len(plan), self.dimension), dtype=np.float32)
        start = 0
        for block, _labels in plan.chunks(65_536):
            vectors[start : start + block.shape[0]] = block
            start += block.shape[0]
        self.base = np.zeros((0, self.dimension), dtype=np.float32)
        self.base_labels = np.zeros(0, dtype=np.int64)
        self.base_alive = np.zeros(0, dtype=np.bool_)
        self.base_keepalive = None
        self.base_reader = None
        self.retired_base = 0
        self._tail, self._tail_labels = vectors, plan.labels.copy()
        self._tail_alive = np.ones(len(plan), dtype=np.bool_)
        self.tail_size = len(plan)
        self._row_of_label[plan.labels] = np.arange(len(plan), dtype=np.int64)

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


def top_k(
    labels: Labels, scores: npt.NDArray[np.float32], k: int
) -> tuple[Labels, npt.NDArray[np.float32]]:
    """The ``k`` best (finite) scores, best first; equal scores in ascending label order."""
    finite = np.isfinite(scores)
    if not finite.all():
        labels, scores = labels[finite], scores[finite]
    k = min(k, int(scores.shape[0]))
    if k == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    if k < scores.shape[0]:
        cut = np.partition(-scores, k - 1)[k - 1]
        pick = np.flatnonzero(-scores <= cut)  # every row tied at the boundary, too
        labels, scores = labels[pick], scores[pick]
    order = np.lexsort((labels, -scores))[:k]
    return labels[order], scores[order].astype(np.float32, copy=False)


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
