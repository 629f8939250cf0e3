"""Label <-> string id for a ``VectorStore``, in about a quarter of the memory of a dict.

A million ids held as a Python list of ``str`` plus a ``dict[str, int]`` took 129 MiB —
more than the HNSW graph over the same million vectors — because every id and every
label is a Python object. ``IdTable`` keeps the ids as one UTF-8 byte string with an
end-offset array, and finds a label through a sorted array of the ids' 64-bit hashes
(``hash(str)``: per process, never saved). Ids added since the last merge wait in a
small dict, merged into the sorted arrays (one numpy sort) once they outnumber an eighth
of them, so a bulk load stays linear-ish and a reopened table holds no Python objects
per id: ~32 bytes per short id in all.

Labels are positions: the n-th distinct id added has label n. A table never forgets an
id; ``subset`` makes a new, smaller table (labels ``0..k-1`` for the ids of ``k`` given
labels) for a store that relabels when it compacts (``dense._vector_store``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from operator import eq

import numpy as np
import numpy.typing as npt

_MERGE_MIN = 65_536  # recent ids kept in the dict before a merge ...
_MERGE_FRACTION = 8  # ... or an eighth of the merged ones, whichever is larger
_GATHER_IDS = 65_536  # ids per numpy gather in ``subset`` (bounds its index arrays)

Int64s = npt.NDArray[np.int64]


class IdTable:
    """The ids of a store, by label; ``get(id)`` finds a label. Not thread-safe (the
    owning index holds its lock around writes)."""

    def __init__(self, ids: Iterable[str] = ()) -> None:
        self._blob = bytearray()
        self._ends: Int64s = np.zeros(0, dtype=np.int64)
        self._n = 0
        self._sorted_hashes: Int64s = np.zeros(0, dtype=np.int64)
        self._sorted_labels: Int64s = np.zeros(0, dtype=np.int64)
        self._recent: dict[str, int] = {}
        self._extend_new(list(ids))

    # ----------------------------------------------------------------- reading
    def __len__(self) -> int:
        return self._n

    def __getitem__(self, label: int) -> str:
        if not 0 <= label < self._n:
            raise IndexError(f"label {label} outside the id table")
        start = int(self._ends[label - 1]) if label else 0
        return self._blob[start : int(self._ends[label])].decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        for label in range(self._n):
            yield self[label]

    def __contains__(self, doc_id: object) -> bool:
        return isinstance(doc_id, str) and self.get(doc_id) is not None

    def get(self, doc_id: str) -> int | None:
        """The label of ``doc_id``, None if it was never added."""
        label = self._recent.get(doc_id)
        if label is not None:
            return label
        hashes = self._sorted_hashes
        h = hash(doc_id)
        i = int(np.searchsorted(hashes, h))
        while i < hashes.shape[0] and int(hashes[i]) == h:  # equal hashes: compare ids
            candidate = int(self._sorted_labels[i])
            if self[candidate] == doc_id:
                return candidate
            i += 1
        return None

    def labels_of(self, ids: Sequence[str]) -> Int64s:
        """``get`` for each of ``ids`` (``-1``: never added), with one hash search for
        the batch: only ids whose hash the table holds are compared one by one."""
        count = len(ids)
        hashes = np.fromiter(map(hash, ids), dtype=np.int64, count=count)
        sorted_hashes = self._sorted_hashes
        at = np.searchsorted(sorted_hashes, hashes)
        maybe = at < sorted_hashes.shape[0]
        maybe[maybe] = sorted_hashes[at[maybe]] == hashes[maybe]
        labels = np.full(count, -1, dtype=np.int64)
        hits = np.flatnonzero(maybe)
        first = self._sorted_labels[at[hits]]  # the first label with that hash
        wanted = [ids[j] for j in hits.tolist()]
        same = np.fromiter(map(eq, wanted, self.ids_at(first)), dtype=np.bool_, count=len(wanted))
        labels[hits[same]] = first[same]
        for j in hits[~same].tolist():  # another id with the same hash came first
            label = self.get(ids[j])
            if label is not None:
                labels[j] = label
        if self._recent:
            recent = self._recent
            fresh = np.fromiter((recent.get(d, -1) for d in ids), dtype=np.int64, count=count)
            labels = np.where(fresh >= 0, fresh, labels)
        return labels

    def ids_at(self, labels: Int64s) -> list[str]:
        """The ids at ``labels``, decoded from one gather of their bytes."""
        blob, ends = self._gather(np.asarray(labels, dtype=np.int64))
        starts = (ends - np.diff(ends, prepend=0)).tolist()
        return [blob[a:b].decode("utf-8") for a, b in zip(starts, ends.tolist(), strict=True)]

    def tolist(self) -> list[str]:
        return list(self)

    def copy(self) -> IdTable:
        """An independent table with the same labels, for a builder to read off the lock
        while the original keeps growing. Cheap: one copy of the bytes and offsets; the
        sorted arrays are shared, since both tables only ever replace them."""
        twin = IdTable()
        twin._blob = bytearray(self._blob)
        twin._ends = self._ends[: self._n].copy()
        twin._n = self._n
        twin._sorted_hashes, twin._sorted_labels = self._sorted_hashes, self._sorted_labels
        twin._recent = dict(self._recent)
        return twin

    def subset(self, labels: Int64s) -> IdTable:
        """A new table whose label ``i`` is this table's id of ``labels[i]`` (distinct
        labels). Vectorised — the ids' bytes are gathered, and their hashes kept in the
        order already sorted, without a Python object per id — so relabelling a million
        ids takes a fraction of a second."""
        labels = np.asarray(labels, dtype=np.int64)
        n = int(labels.shape[0])
        remap = np.full(self._n, -1, dtype=np.int64)
        remap[labels] = np.arange(n, dtype=np.int64)
        out = IdTable()
        blob, out._ends = self._gather(labels)
        out._blob = bytearray(blob)
        out._n = n
        new = remap[self._sorted_labels]
        kept = new >= 0  # still sorted by hash: no sort
        out._sorted_hashes, out._sorted_labels = self._sorted_hashes[kept], new[kept]
        hashes, old = self._recent_arrays()  # the unmerged few
        new = remap[old]
        out._merge(hashes[new >= 0], new[new >= 0])
        return out

    def append_from(self, source: IdTable, labels: Int64s) -> Int64s:
        """Add ``source``'s ids at ``labels`` (distinct, none of them in this table) at
        the next labels, which are returned; vectorised like ``subset``."""
        labels = np.asarray(labels, dtype=np.int64)
        count = int(labels.shape[0])
        first = self._n
        if not count:
            return np.zeros(0, dtype=np.int64)
        blob, ends = source._gather(labels)
        self._reserve(first + count)
        self._ends[first : first + count] = len(self._blob) + ends
        self._blob += blob
        self._n = first + count
        by_label = np.empty(source._n, dtype=np.int64)
        by_label[source._sorted_labels] = source._sorted_hashes
        hashes, old = source._recent_arrays()
        by_label[old] = hashes
        new = np.arange(first, first + count, dtype=np.int64)
        self._merge(by_label[labels], new)
        return new

    def _gather(self, labels: Int64s) -> tuple[bytes, Int64s]:
        """The UTF-8 bytes of the ids at ``labels``, concatenated, and their end offsets."""
        ends = self._ends[: self._n]
        starts = np.concatenate([np.zeros(1, dtype=np.int64), ends[:-1]])
        lengths = ends[labels] - starts[labels]
        if not labels.shape[0]:
            return b"", lengths
        low = int(starts[labels].min())  # copy only the span the ids lie in
        blob = np.frombuffer(self._blob[low : int(ends[labels].max())], dtype=np.uint8)
        starts = starts - low
        pieces: list[bytes] = []
        for lo in range(0, int(labels.shape[0]), _GATHER_IDS):
            chunk = labels[lo : lo + _GATHER_IDS]
            first, sizes = starts[chunk], lengths[lo : lo + _GATHER_IDS]
            placed = np.cumsum(sizes) - sizes  # where each id starts in the piece
            at = np.repeat(first - placed, sizes) + np.arange(int(sizes.sum()))
            pieces.append(blob[at].tobytes())
        return b"".join(pieces), np.cumsum(lengths, dtype=np.int64)

    def _recent_arrays(self) -> tuple[Int64s, Int64s]:
        """Hashes and labels of the ids not merged yet (``str`` caches its hash)."""
        count = len(self._recent)
        hashes = np.fromiter(map(hash, self._recent), dtype=np.int64, count=count)
        return hashes, np.fromiter(self._recent.values(), dtype=np.int64, count=count)

    # ----------------------------------------------------------------- writing
    def add(self, doc_id: str) -> int:
        """The label of ``doc_id``, given the next one if it is new."""
        label = self.get(doc_id)
        if label is not None:
            return label
        label = self._append([doc_id.encode("utf-8")])
        self._recent[doc_id] = label
        if len(self._recent) > max(_MERGE_MIN, self._sorted_hashes.shape[0] // _MERGE_FRACTION):
            self._merge_recent()
        return label

    def add_all(self, ids: Sequence[str]) -> Int64s:
        """``add`` for each of ``ids``, in order, with one hash search and one
        append for the batch instead of numpy calls per id (a bulk load adds millions)."""
        count = len(ids)
        hashes = np.fromiter((hash(doc_id) for doc_id in ids), dtype=np.int64, count=count)
        sorted_hashes = self._sorted_hashes
        at = np.searchsorted(sorted_hashes, hashes)
        maybe_known = at < sorted_hashes.shape[0]
        maybe_known[maybe_known] = sorted_hashes[at[maybe_known]] == hashes[maybe_known]
        labels = np.empty(count, dtype=np.int64)
        fresh: list[str] = []
        fresh_at: list[int] = []
        recent = self._recent
        for j, (doc_id, known) in enumerate(zip(ids, maybe_known.tolist(), strict=True)):
            label = recent.get(doc_id)
            if label is None and known:
                label = self.get(doc_id)
            if label is None:
                fresh.append(doc_id)
                fresh_at.append(j)
            else:
                labels[j] = label
        if len(set(fresh)) != len(fresh):  # a repeated new id: one label, as ``add`` gives
            return np.fromiter((self.add(doc_id) for doc_id in ids), dtype=np.int64, count=count)
        if fresh:
            first = self._append([doc_id.encode("utf-8") for doc_id in fresh])
            new_labels = range(first, first + len(fresh))
            labels[fresh_at] = np.asarray(new_labels, dtype=np.int64)
            recent.update(zip(fresh, new_labels, strict=True))
            if len(recent) > max(_MERGE_MIN, sorted_hashes.shape[0] // _MERGE_FRACTION):
                self._merge_recent()
        return labels

    def _append(self, encoded: list[bytes]) -> int:
        """Store encoded ids at the next labels; return the first of them."""
        first = self._n
        need = first + len(encoded)
        self._reserve(need)
        offset = len(self._blob)
        lengths = np.fromiter((len(e) for e in encoded), dtype=np.int64, count=len(encoded))
        self._ends[first:need] = offset + np.cumsum(lengths)
        self._blob += b"".join(encoded)
        self._n = need
        return first

    def _reserve(self, labels: int) -> None:
        if labels > self._ends.shape[0]:
            grown = np.zeros(max(labels, 2 * self._ends.shape[0], 1024), dtype=np.int64)
            grown[: self._n] = self._ends[: self._n]
            self._ends = grown

    def _extend_new(self, ids: list[str]) -> None:
        """Add ``ids`` (all new, distinct: ``ValueError`` otherwise) in one merge."""
        if not ids:
            return
        first = self._append([doc_id.encode("utf-8") for doc_id in ids])
        hashes = np.fromiter((hash(doc_id) for doc_id in ids), dtype=np.int64, count=len(ids))
        labels = np.arange(first, first + len(ids), dtype=np.int64)
        self._merge(hashes, labels)
        self._check_distinct()

    def _merge_recent(self) -> None:
        if not self._recent:
            return
        ids = list(self._recent)
        hashes = np.fromiter((hash(doc_id) for doc_id in ids), dtype=np.int64, count=len(ids))
        labels = np.fromiter(self._recent.values(), dtype=np.int64, count=len(ids))
        self._merge(hashes, labels)
        self._recent = {}

    def _merge(self, hashes: Int64s, labels: Int64s) -> None:
        """Insert ``(hash, label)`` pairs into the sorted arrays: a sort of the new ones
        and one linear insertion, not a sort of the whole table. Both arrays are
        replaced, never written (``copy`` shares them)."""
        if not hashes.shape[0]:
            return
        order = np.lexsort((labels, hashes))
        hashes, labels = hashes[order], labels[order]
        at = np.searchsorted(self._sorted_hashes, hashes, side="right")
        self._sorted_hashes = np.insert(self._sorted_hashes, at, hashes)
        self._sorted_labels = np.insert(self._sorted_labels, at, labels)

    def _check_distinct(self) -> None:
        hashes = self._sorted_hashes
        same = np.flatnonzero(hashes[1:] == hashes[:-1])
        if same.shape[0] == 0:
            return
        seen: set[str] = set()
        for i in np.unique(np.concatenate([same, same + 1])).tolist():
            doc_id = self[int(self._sorted_labels[i])]
            if doc_id in seen:
                raise ValueError(f"duplicate id in the id table: {doc_id[:80]!r}")
            seen.add(doc_id)
