"""A compiled allow-list: string ids turned into a FAISS ``IDSelector`` once, reused."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from dense._faiss import faiss_module


class LabelLookup(Protocol):
    """What an ``AllowList`` needs of its index's id table: a label, or None."""

    def get(self, doc_id: str, /) -> int | None: ...


class AllowList:
    """The documents a search may return, compiled for one ``FaissIndex``.

    Build it with ``FaissIndex.allow_list(ids)`` and pass it as ``allow=`` to as many
    searches as you like: converting thousands of string ids per query would cost more
    than the search. Labels never change for an id within an index, so the list stays
    valid across adds and removals; ids unknown when it was compiled are resolved once
    they are added. It is bound to the index that built it and is thread-safe.
    """

    __slots__ = ("_lock", "_owner", "_pending", "_state", "_table_size")

    def __init__(
        self,
        owner: object,
        ids: Iterable[str],
        label_of: LabelLookup,
        table_size: int,
    ) -> None:
        labels: list[int] = []
        pending: list[str] = []
        refuse_single_id(ids)
        for doc_id in dict.fromkeys(ids):
            if not isinstance(doc_id, str):
                raise ValueError(f"allow-list ids must be strings, got {type(doc_id).__name__}")
            label = label_of.get(doc_id)
            if label is None:
                pending.append(doc_id)
            else:
                labels.append(label)
        self._owner = owner
        self._lock = threading.Lock()
        self._pending: frozenset[str] = frozenset(pending)
        self._table_size = table_size
        array = np.asarray(labels, dtype=np.int64)
        self._state: tuple[npt.NDArray[np.int64], _Bitmap] = (array, _Bitmap(array))

    def __len__(self) -> int:
        """Number of ids this list admits that the index has seen so far."""
        return int(self._state[0].shape[0])

    def compiled(
        self, owner: object, label_of: Callable[[str], int | None], table_size: int
    ) -> tuple[npt.NDArray[np.int64], Any]:
        """Labels and selector, resolving ids added to the index since compilation."""
        if owner is not self._owner:
            raise ValueError("this AllowList was built by a different FaissIndex")
        if self._pending and table_size != self._table_size:
            with self._lock:
                if table_size != self._table_size:
                    self._resolve(label_of, table_size)
        labels, bitmap = self._state  # one tuple: labels and selector always agree
        return labels, bitmap.selector

    def _resolve(self, label_of: Callable[[str], int | None], table_size: int) -> None:
        found = {doc_id: label_of(doc_id) for doc_id in self._pending}
        new = [label for label in found.values() if label is not None]
        if new:
            labels = np.concatenate([self._state[0], np.asarray(new, dtype=np.int64)])
            self._state = (labels, _Bitmap(labels))
            self._pending = frozenset(d for d, label in found.items() if label is None)
        self._table_size = table_size


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
