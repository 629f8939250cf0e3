"""A compiled allow-list: string ids turned into a FAISS ``IDSelector`` once, reused."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt

from dense._faiss import faiss_module
from dense._id_table import IdTable
from dense._relabel import Era


class AllowList:
    """The documents a search may return, compiled for one ``FaissIndex``.

    Build it with ``FaissIndex.allow_list(ids)`` and pass it as ``allow=`` to as many
    searches as you like: converting thousands of string ids per query would cost more
    than the search. It stays valid across adds and removals: ids unknown when it was
    compiled are resolved once they are added. When the index compacts its id table
    (a new graph, or a compaction without one) labels change: the list notices that
    the labelling (``dense._relabel.Era``) is another one and translates itself once,
    with the compaction's old-to-new label array; it holds its era, not the table, so
    only a list that has not been used since a compaction keeps the old table alive
    (to name the ids the compaction dropped). It is bound to the index that built it
    and is thread-safe.
    """

    __slots__ = ("_lock", "_owner", "_state")

    def __init__(self, owner: object, ids: Iterable[str], table: IdTable, era: Era) -> None:
        refuse_single_id(ids)
        wanted = list(dict.fromkeys(ids))
        for doc_id in wanted:
            if not isinstance(doc_id, str):
                raise ValueError(f"allow-list ids must be strings, got {type(doc_id).__name__}")
        self._owner = owner
        self._lock = threading.Lock()
        self._state = _State.of(wanted, table, era)

    def __len__(self) -> int:
        """Number of ids this list admits that the index has seen so far."""
        return int(self._state.labels.shape[0])

    def compiled(
        self, owner: object, table: IdTable, era: Era
    ) -> tuple[npt.NDArray[np.int64], Any]:
        """Labels and selector against ``table`` (the index's current id table, of
        labelling ``era``), resolving ids added since compilation and translating after
        a relabel. Call under the index's read lock."""
        if owner is not self._owner:
            raise ValueError("this AllowList was built by a different FaissIndex")
        state = self._state
        if state.era is not era or (state.pending and len(table) != state.table_size):
            with self._lock:
                state = self._state
                if state.era is not era:
                    state = state.translated(table, era)
                elif state.pending and len(table) != state.table_size:
                    state = state.resolved(table)
                self._state = state
        return state.labels, state.bitmap.selector


class _State:
    """One compilation, swapped as a whole: labels, selector and era always agree."""

    __slots__ = ("bitmap", "era", "labels", "pending", "table_size")

    def __init__(
        self,
        table: IdTable,
        era: Era,
        labels: npt.NDArray[np.int64],
        pending: frozenset[str],
        bitmap: _Bitmap | None = None,
    ) -> None:
        self.era = era
        self.table_size = len(table)
        self.labels = labels
        self.pending = pending
        self.bitmap = _Bitmap(labels) if bitmap is None else bitmap

    @classmethod
    def of(cls, ids: list[str], table: IdTable, era: Era) -> _State:
        labels = table.labels_of(ids)
        pending = frozenset(ids[j] for j in np.flatnonzero(labels < 0).tolist())
        return cls(table, era, labels[labels >= 0], pending)

    def translated(self, table: IdTable, era: Era) -> _State:
        """This state in ``era`` (``table``'s): each compaction since maps the labels
        with one gather (``dense._relabel`` composes them, so there is one); ids it
        dropped are named by the old table and wait, pending, to be added again."""
        labels, at, dropped, settled = self.labels, self.era, list[str](), -1
        while at is not era:
            hop = at.next
            if hop is None:
                raise ValueError("this AllowList was compiled against an unrelated id table")
            moved = hop.remap[labels]
            dropped += hop.table.ids_at(labels[moved < 0])
            labels, at = moved[moved >= 0], hop.to
            settled = hop.settled if settled < 0 else 0
        found = _found(table, list(self.pending), 0)
        found.update(_found(table, dropped, settled))
        if found:
            labels = np.concatenate([labels, np.fromiter(found.values(), dtype=np.int64)])
        return _State(table, era, labels, self.pending.union(dropped) - found.keys())

    def resolved(self, table: IdTable) -> _State:
        """Pending ids that ``table`` (this state's, grown since) knows now."""
        found = _found(table, list(self.pending), self.table_size)
        if not found:
            return _State(table, self.era, self.labels, self.pending, self.bitmap)
        labels = np.concatenate([self.labels, np.fromiter(found.values(), dtype=np.int64)])
        return _State(table, self.era, labels, self.pending - found.keys())


def _found(table: IdTable, ids: list[str], since: int) -> dict[str, int]:
    """The labels ``table`` has for ``ids`` (distinct), none of which is among its
    labels below ``since``: the ids added since are read when they are fewer."""
    if not ids or len(table) <= since:
        return {}
    if len(table) - since < len(ids):
        wanted = set(ids)
        added = table.ids_at(np.arange(since, len(table), dtype=np.int64))
        return {d: since + i for i, d in enumerate(added) if d in wanted}
    labels = table.labels_of(ids)
    return {ids[j]: int(labels[j]) for j in np.flatnonzero(labels >= 0).tolist()}


class _Bitmap:
    """Keeps the bitmap alive as long as the FAISS selector that points into it."""

    __slots__ = ("bits", "selector")

    def __init__(self, labels: npt.NDArray[np.int64]) -> None:
        size = int(labels.max()) + 1 if labels.size else 1
        mask = np.zeros(size, dtype=bool)
        mask[labels] = True
        self.bits = np.packbits(mask, bitorder="little")
        faiss = faiss_module()
        self.selector = faiss.IDSelectorBitmap(self.bits.shape[0], faiss.swig_ptr(self.bits))


def refuse_single_id(ids: object) -> None:
    """A lone string where a collection of ids belongs would be read character by
    character ("ab" as "a" and "b"): refuse it."""
    if isinstance(ids, str | bytes):
        raise ValueError("expected a collection of ids, got a single string")
