"""How the labels of one id table map onto the next, for allow-lists compiled long ago.

A ``VectorStore`` relabels at each compaction (``dense._vector_store``): every labelling
is an ``Era``, and the compaction that ends one leaves on it a ``Relabel``: an array
from its labels to the new era's (``-1`` for ids the new table dropped) and the old
table, to name the dropped ids. An allow-list holds the era it was compiled in, not the
table: it translates with one numpy gather (``remap[labels]``), and decodes only its
own dropped labels. Nothing but stale allow-lists holds an old era, so the old table
and its remap live exactly as long as some list still needs them. When a later
compaction finds such an era still held, it composes that era's remap with its own, so
a list is always one gather from the current labels, and a stale era never holds more
than one table, however many compactions it missed.
"""

from __future__ import annotations

import weakref

import numpy as np
import numpy.typing as npt

from dense._id_table import IdTable

Int64s = npt.NDArray[np.int64]


class Era:
    """One labelling of a store's ids; ``next`` is set when a compaction ends it."""

    __slots__ = ("__weakref__", "next")

    def __init__(self) -> None:
        self.next: Relabel | None = None


class Relabel:
    """``remap[label]``: the label in era ``to`` of this era's ``label``, ``-1`` if the
    id was dropped (``table[label]`` names it). No dropped id is among the new table's
    labels below ``settled`` (its size when made; 0 once composed: an id dropped by
    one compaction may have been added again and kept by the next)."""

    __slots__ = ("remap", "settled", "table", "to")

    def __init__(self, remap: Int64s, table: IdTable, to: Era, settled: int) -> None:
        self.remap = remap
        self.table = table
        self.to = to
        self.settled = settled


class Eras:
    """A store's current era and the old ones some allow-list still holds (weakly)."""

    def __init__(self) -> None:
        self.current = Era()
        self._stale: weakref.WeakSet[Era] = weakref.WeakSet()

    def restart(self) -> None:
        """A new labelling unrelated to the last (a store restored from a file)."""
        self.current = Era()

    def advance(self, remap: Int64s, old_table: IdTable, new_size: int) -> None:
        """End the current era with ``remap`` (old label -> new label or -1; the new
        table holds ``new_size`` ids) and start the next. Call under the store's write
        lock: allow-lists read ``next`` under the read lock."""
        old, new = self.current, Era()
        for era in list(self._stale):  # lists that missed compactions: compose
            hop = era.next
            if hop is not None and hop.to is old:
                seen = hop.remap >= 0
                composed = np.full(hop.remap.shape[0], -1, dtype=np.int64)
                composed[seen] = remap[hop.remap[seen]]
                era.next = Relabel(composed, hop.table, new, 0)
        old.next = Relabel(remap, old_table, new, new_size)
        self._stale.add(old)
        self.current = new
