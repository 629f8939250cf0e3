"""The length fields of a saved graph, checked against its section before FAISS reads it.

FAISS reads an array by its length field first and allocates what that field says before
it reads a byte of the array (``READVECTOR``: resize, then read). A damaged length in a
large index file — whose checksums run after opening, see ``dense.index_file`` — made
FAISS zero-fill up to the machine's memory before the short read failed. So before
``read_index``, this module walks the structure Tandem writes (an ``IndexIDMap`` over an
``IndexHNSWFlat`` or ``IndexHNSWSQ``), reading only the fixed fields and the length
fields, and refuses any array longer than the bytes left in the section.

The walk knows FAISS's layout, which a FAISS release could change. It is therefore
trusted only if it walks the installed FAISS's own output of both graph kinds exactly to
its end (``walk_matches_faiss``); otherwise, and for any structure it does not recognise,
it has no opinion and FAISS's own checks (and ``dense._graph.validate``) stand alone.
"""

from __future__ import annotations

import functools
import io
import struct
from typing import IO

import numpy as np

from dense._faiss import faiss_module

_HEADER = struct.Struct("<iqqq?i")  # d, ntotal, two unused, is_trained, metric_type
_HNSW_TAIL = struct.Struct("<iiiii")  # entry point, max level, efConstruction, efSearch, unused
_SQ_FIELDS = struct.Struct("<iifQQ")  # qtype, rangestat, rangestat_arg, d, code_size
_LENGTH = struct.Struct("<Q")
_FOURCC = struct.Struct("<4s")


class _Unrecognised(Exception):
    """Not the structure this walk knows: no opinion."""


class _Cursor:
    def __init__(self, fh: IO[bytes], start: int, end: int) -> None:
        self._fh, self.at, self._end = fh, start, end

    def take(self, layout: struct.Struct) -> tuple[object, ...]:
        if self.at + layout.size > self._end:
            raise _Unrecognised
        self._fh.seek(self.at)
        raw = self._fh.read(layout.size)
        if len(raw) != layout.size:
            raise _Unrecognised
        self.at += layout.size
        return layout.unpack(raw)

    def array(self, item_bytes: int, name: str) -> None:
        """Skip one length-prefixed array; ``ValueError`` if it would pass the end."""
        (count,) = self.take(_LENGTH)
        assert isinstance(count, int)
        left = self._end - self.at
        if count > left // item_bytes:
            raise ValueError(
                f"graph {name} claims {count} items of {item_bytes} bytes, "
                f"{left} bytes are left in the section"
            )
        self.at += count * item_bytes


def _fourcc(cursor: _Cursor, *expected: bytes) -> bytes:
    (code,) = cursor.take(_FOURCC)
    if code not in expected:
        raise _Unrecognised
    assert isinstance(code, bytes)
    return code


def _header(cursor: _Cursor) -> None:
    metric = cursor.take(_HEADER)[5]
    assert isinstance(metric, int)
    if metric > 1:
        cursor.take(struct.Struct("<f"))


def _walk(cursor: _Cursor) -> int:
    """Walk an id-mapped HNSW structure; the offset where it ends."""
    _fourcc(cursor, b"IxMp")
    _header(cursor)
    _fourcc(cursor, b"IHNf", b"IHNs")
    _header(cursor)
    for name, item_bytes in (
        ("level probabilities", 8),
        ("neighbours per level", 4),
        ("levels", 4),
        ("offsets", 8),
        ("neighbours", 4),
    ):
        cursor.array(item_bytes, name)
    cursor.take(_HNSW_TAIL)
    storage = _fourcc(cursor, b"IxFI", b"IxSQ")
    _header(cursor)
    if storage == b"IxFI":
        cursor.array(4, "vectors")
    else:
        cursor.take(_SQ_FIELDS)
        cursor.array(4, "quantiser table")
        cursor.array(1, "codes")
    cursor.array(8, "id map")
    return cursor.at


@functools.cache
def walk_matches_faiss() -> bool:
    """The walk ends exactly where the installed FAISS's own output of both graph kinds
    ends (three vectors each): only then are its refusals trusted."""
    faiss = faiss_module()
    vectors = np.eye(3, 4, dtype=np.float32)
    for inner in (
        faiss.IndexHNSWFlat(4, 4, faiss.METRIC_INNER_PRODUCT),
        faiss.IndexHNSWSQ(4, faiss.ScalarQuantizer.QT_8bit, 4, faiss.METRIC_INNER_PRODUCT),
    ):
        index = faiss.IndexIDMap(inner)
        index.train(vectors)
        index.add_with_ids(vectors, np.arange(3, dtype=np.int64))
        raw = faiss.serialize_index(index).tobytes()
        try:
            if _walk(_Cursor(io.BytesIO(raw), 0, len(raw))) != len(raw):
                return False
        except (_Unrecognised, ValueError):
            return False
    return True


def check_lengths(fh: IO[bytes], start: int, length: int) -> None:
    """``ValueError`` if an array length field of the graph saved at ``start`` claims more
    bytes than its ``length``-byte section holds (nothing if the walk has no opinion)."""
    if not walk_matches_faiss():
        return
    try:
        _walk(_Cursor(fh, start, start + length))
    except _Unrecognised:
        return
