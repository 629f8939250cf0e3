"""A compiled allow-list: string ids turned into a FAISS ``IDSelector`` once, reused."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from dense._faiss import faiss_module


class LabelTable(Protocol):
    """What an ``AllowList`` needs of its index's id table (``dense._id_table.IdTable``)."""

    def get(self, doc_id: str, /) -> int | None: ...

    def __getitem__(self, label: int, /) -> str: ...

    def __len__(self) -> int: ...


class AllowList:
    """The documents a search may return, compiled for one ``FaissIndex``.

    Build it with ``FaissIndex.allow_list(ids)`` and pass it as ``allow=`` to as many
    searches as you like: converting thousands of string ids per query would cost more
    than the search. It stays valid across adds and removals: ids unknown when it was
    compiled are resolved once they are added. When the index compacts its id table
    (a new graph, or a compaction without one) labels change: the list notices that
    the table is another one and translates itself once, through the ids of the table
    it was compiled against (which it holds until then), so a label is never read
    against a table it did not come from. It is bound to the index that built it and
    is thread-safe.
    """

    __slots__ = ("_lock", "_owner", "_state")

    def __init__(self, owner: object, ids: Iterable[str], table: LabelTable) -> None:
        refuse_single_id(ids)
        wanted = list(dict.fromkeys(ids))
        for doc_id in wanted:
            if not isinstance(doc_id, str):
                raise ValueError(f"allow-list ids must be strings, got {type(doc_id).__name__}")
        self._owner = owner
        self._lock = threading.Lock()
        self._state = _State.of(wanted, table)

    def __len__(self) -> int:
        """Number of ids this list admits that the index has seen so far."""
        return int(self._state.labels.shape[0])

    def compiled(self, owner: object, table: LabelTable) -> tuple[npt.NDArray[np.int64], Any]:
        """Labels and selector against ``table`` (the index's current id table),
        resolving ids added since compilation and translating after a relabel."""
        if owner is not self._owner:
            raise ValueError("this AllowList was built by a different FaissIndex")
        state = self._state
        stale = state.table is not table
        if stale or (state.pending and len(table) != state.table_size):
            with self._lock:
                state = self._state
                if state.table is not table:
                    old = state.table
                    ids = [old[label] for label in state.labels.tolist()]
                    state = _State.of([*ids, *state.pending], table)
                elif state.pending and len(table) != state.table_size:
                    state = state.resolved(table)
                self._state = state
        return state.labels, state.bitmap.selector


class _State:
    """One compilation, swapped as a whole: labels, selector and table always agree."""

    __slots__ = ("bitmap", "labels", "pending", "table", "table_size")

    def __init__(
        self,
        table: LabelTable,
        labels: npt.NDArray[np.int64],
        pending: frozenset[str],
        bitmap: _Bitmap | None = None,
    ) -> None:
        self.table = table
        self.table_size = len(table)
        self.labels = labels
        self.pending = pending
        self.bitmap = _Bitmap(labels) if bitmap is None else bitmap

    @classmethod
    def of(cls, ids: Iterable[str], table: LabelTable) -> _State:
        labels: list[int] = []
        pending: list[str] = []
        for doc_id in ids:
            label = table.get(doc_id)
            if label is None:
                pending.append(doc_id)
            else:
                labels.append(label)
        return cls(table, np.asarray(labels, dtype=np.int64), frozenset(pending))

    def resolved(self, table: LabelTable) -> _State:
        """Pending ids that ``table`` (this state's, grown since) knows now."""
        found = {doc_id: table.get(doc_id) for doc_id in self.pending}
        new = [label for label in found.values() if label is not None]
        if not new:
            return _State(table, self.labels, self.pending, self.bitmap)
        labels = np.concatenate([self.labels, np.asarray(new, dtype=np.int64)])
        pending = frozenset(d for d, label in found.items() if label is None)
        return _State(table, labels, pending)


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
