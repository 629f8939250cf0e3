"""Exact scoring over a ``VectorStore``'s live rows: every row, the tail, or given rows.

Ordering: best score first, equal scores in ascending label order. Scores near the cut
are computed again row by row (see ``_settled_top``), so where a row sits never breaks a
tie.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dense._vector_store import Labels, Vectors, VectorStore

_GATHER_FRACTION = 4  # allow-lists over more than 1/4 of the rows: score all, then mask
_RESCORE_SLACK = 1e-5  # scores this close below the k-th are scored again row by row


def exact_top(
    store: VectorStore,
    query: Vectors,
    k: int,
    rows: Labels | None = None,
    *,
    tail_only: bool = False,
) -> tuple[Labels, npt.NDArray[np.float32]]:
    """Exact top-``k`` labels and scores by inner product, best first, among the
    live ``rows`` (``None``: every live row; ``tail_only``: the live tail rows)."""
    q = query[0]
    if rows is not None and rows.shape[0] * _GATHER_FRACTION < max(store.size, 1):
        scores = store.vectors_at(rows) @ q
        labels = _labels_at(store, rows)
        return _settled_top(store, labels, scores, rows, q, k)
    parts_s: list[npt.NDArray[np.float32]] = []
    parts_l: list[Labels] = []
    if not tail_only and store.base_rows:
        s = store.base @ q
        if store.retired_base:
            s[~store.base_alive] = -np.inf
        parts_s.append(s)
        parts_l.append(store.base_labels)
    if store.tail_size:
        s = store.tail @ q
        s[~store.tail_alive] = -np.inf
        parts_s.append(s)
        parts_l.append(store.tail_labels)
    if not parts_s:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    scores = np.concatenate(parts_s) if len(parts_s) > 1 else parts_s[0]
    labels = np.concatenate(parts_l) if len(parts_l) > 1 else parts_l[0]
    if rows is not None:
        keep = np.zeros(scores.shape[0], dtype=np.bool_)
        keep[rows if not tail_only else rows - store.base_rows] = True
        scores = np.where(keep, scores, -np.inf)
    first_row = store.base_rows if tail_only else 0  # position i scores row first_row + i
    return _settled_top(store, labels, scores, None, q, k, first_row)


def _settled_top(
    store: VectorStore,
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
    exact = np.einsum("ij,j->i", store.vectors_at(at), q)  # each row's own sum
    return top_k(labels[near], exact, k)


def _labels_at(store: VectorStore, rows: Labels) -> Labels:
    out = np.empty(rows.shape[0], dtype=np.int64)
    in_base = rows < store.base_rows
    out[in_base] = store.base_labels[rows[in_base]]
    out[~in_base] = store.tail_labels[rows[~in_base] - store.base_rows]
    return out


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
