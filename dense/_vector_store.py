"""The source of truth behind a ``FaissIndex``: stable labels and the unit vectors.

Every string id gets an int64 label the first time it is seen; labels are never reused
or reassigned (a removed id keeps its label), so FAISS ids, saved files and compiled
allow-lists agree forever. Stored vectors live in one growable float32 matrix (row
order is arbitrary; removal moves the last row into the hole). Not thread-safe: the
owning index holds the lock.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]
Labels = npt.NDArray[np.int64]


class VectorStore:
    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.ids: list[str] = []  # label -> string id (removed ids included)
        self.label_of: dict[str, int] = {}
        self._row_of_label: Labels = np.full(0, -1, dtype=np.int64)  # -1: not stored
        self._labels: Labels = np.zeros(0, dtype=np.int64)  # row -> label
        self._matrix: Vectors = np.zeros((0, dimension), dtype=np.float32)
        self.size = 0

    @property
    def labels(self) -> Labels:
        """Label of each stored row (a view)."""
        return self._labels[: self.size]

    @property
    def matrix(self) -> Vectors:
        """The stored unit vectors, one row per stored id (a view)."""
        return self._matrix[: self.size]

    def contains(self, doc_id: str) -> bool:
        label = self.label_of.get(doc_id)
        return label is not None and bool(self._row_of_label[label] >= 0)

    def stored_ids(self) -> list[str]:
        return [self.ids[label] for label in self.labels.tolist()]

    def upsert(self, ids: list[str], matrix: Vectors) -> tuple[Labels, list[int], list[int]]:
        """Store rows; return (labels, labels that replaced a vector, positions that are new)."""
        for doc_id in ids:
            if doc_id not in self.label_of:
                self.label_of[doc_id] = len(self.ids)
                self.ids.append(doc_id)
        self._reserve(self.size + len(ids))
        labels = np.asarray([self.label_of[i] for i in ids], dtype=np.int64)
        replaced: list[int] = []
        fresh: list[int] = []
        for pos, label in enumerate(labels.tolist()):
            row = int(self._row_of_label[label])
            if row >= 0:
                replaced.append(label)
            else:
                row = self.size
                self.size += 1
                self._labels[row] = label
                self._row_of_label[label] = row
                fresh.append(pos)
            self._matrix[row] = matrix[pos]
        return labels, replaced, fresh

    def remove(self, ids: Iterable[str]) -> list[int]:
        """Drop stored ids (unknown ones ignored); return the removed labels."""
        removed = []
        for doc_id in dict.fromkeys(ids):
            label = self.label_of.get(doc_id)
            if label is None or self._row_of_label[label] < 0:
                continue
            row, last = int(self._row_of_label[label]), self.size - 1
            if row != last:  # move the last row into the hole
                moved = int(self._labels[last])
                self._matrix[row] = self._matrix[last]
                self._labels[row] = moved
                self._row_of_label[moved] = row
            self._row_of_label[label] = -1
            self.size = last
            removed.append(label)
        return removed

    def rows_of(self, labels: Labels) -> Labels:
        """Rows of the stored vectors among ``labels`` (labels not stored are skipped)."""
        rows = self._row_of_label[labels]
        return rows[rows >= 0]

    def exact_top(self, query: Vectors, k: int, rows: Labels) -> list[tuple[str, float]]:
        """Exact top-``k`` among ``rows`` by inner product, best first."""
        scores = self._matrix[rows] @ query[0]
        top = np.argpartition(-scores, k - 1)[:k] if k < scores.shape[0] else np.arange(k)
        top = top[np.argsort(-scores[top], kind="stable")]
        return [(self.ids[int(self._labels[rows[i]])], float(scores[i])) for i in top.tolist()]

    def restore(self, ids: list[str], labels: Labels, vectors: Vectors) -> None:
        """Load saved state into an empty store; ``ValueError`` if it is inconsistent."""
        label_of = {doc_id: label for label, doc_id in enumerate(ids)}
        if len(label_of) != len(ids):
            raise ValueError("duplicate ids in the id table")
        self.ids, self.label_of = list(ids), label_of
        rows = labels.shape[0]
        if _adoptable(vectors, rows, self.dimension):
            self._matrix = vectors  # a fresh array from the loader: no second copy
            self._labels = np.array(labels, dtype=np.int64)
            self._reserve(rows)  # sizes the label -> row table (the matrix fits already)
        else:
            self._reserve(rows)
            self._labels[:rows] = labels
            self._matrix[:rows] = vectors
        self._row_of_label[labels] = np.arange(rows, dtype=np.int64)
        self.size = rows

    def _reserve(self, rows: int) -> None:
        if rows > self._matrix.shape[0]:
            cap = max(rows, 2 * self._matrix.shape[0], 64)
            matrix = np.zeros((cap, self.dimension), dtype=np.float32)
            matrix[: self.size] = self.matrix
            labels = np.zeros(cap, dtype=np.int64)
            labels[: self.size] = self.labels
            self._matrix, self._labels = matrix, labels
        if len(self.ids) > self._row_of_label.shape[0]:
            grown = np.full(max(len(self.ids), 2 * self._row_of_label.shape[0]), -1, np.int64)
            grown[: self._row_of_label.shape[0]] = self._row_of_label
            self._row_of_label = grown


def _adoptable(vectors: Vectors, rows: int, dimension: int) -> bool:
    return (
        vectors.dtype == np.float32
        and vectors.shape == (rows, dimension)
        and vectors.flags.c_contiguous
        and vectors.flags.writeable
        and vectors.flags.owndata
    )
