"""The on-disk format of a ``FaissIndex``: checksummed, written atomically, streamed.

Layout (all integers little-endian)::

    magic      8 bytes   b"TNDMFAIS"
    version    u32       FORMAT_VERSION
    header_len u64       length of the JSON header
    body_len   u64       length of the binary body
    digest     32 bytes  sha256(header + body)
    header     JSON      dimension, id table (label order), row count, params, has_faiss
    body       labels int64[rows] | vectors float32[rows, dimension] | FAISS structure

The vectors are the source of truth; the serialised FAISS structure (HNSW only, to the
end of the file) is a cache that saves a rebuild. Any mismatch in magic, version,
lengths, digest or shapes raises ``FaissIndexCorrupt`` so the caller can rebuild from its
document store.

Memory. Both directions stream through 16 MiB pieces: a save writes and hashes the live
arrays and lets FAISS write its structure through a callback, then fills in the preamble;
a load first verifies the digest over the whole file (nothing is deserialised from an
unverified file), then reads the vectors straight into their final array and lets FAISS
read its structure through a callback. No part of the file is ever held twice, so a
million 384-d vectors with their HNSW graph (3.2 GB on disk) load in about that much
memory, not three times it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from dense._faiss import faiss_module
from dense.contracts import DenseError

MAGIC = b"TNDMFAIS"
FORMAT_VERSION = 2  # 1 held the FAISS structure's length in the header (read in memory)
_PREAMBLE = struct.Struct("<8sIQQ32s")
_CHUNK_BYTES = 16 << 20  # hash, write and read in 16 MiB pieces


class FaissIndexCorrupt(DenseError):
    """A saved index file is truncated, damaged or of an unknown format."""


@dataclass(frozen=True)
class IndexSnapshot:
    """Everything a ``FaissIndex`` needs to come back exactly as it was saved.

    Saving, the arrays are views of the live index; loading, they are fresh arrays the
    caller may adopt. ``faiss_index`` is the FAISS structure (HNSW) or ``None``.
    """

    dimension: int
    ids: list[str]  # position = int64 label; includes removed ids (labels stay stable)
    labels: npt.NDArray[np.int64]  # label of each stored row
    vectors: npt.NDArray[np.float32]  # (rows, dimension)
    params: dict[str, Any] = field(default_factory=dict)
    faiss_index: Any = None


class _HashingWriter:
    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.digest = hashlib.sha256()
        self.written = 0

    def write(self, data: bytes | memoryview) -> int:
        self.digest.update(data)
        self._fh.write(data)
        self.written += len(data) if isinstance(data, bytes) else data.nbytes
        return self.written


def write_snapshot(path: Path, snap: IndexSnapshot) -> None:
    """Write ``snap`` to ``path`` atomically: temp file in the same dir, fsync, rename."""
    labels = np.ascontiguousarray(snap.labels, dtype="<i8")
    vectors = np.ascontiguousarray(snap.vectors, dtype="<f4")
    header = json.dumps(
        {
            "dimension": snap.dimension,
            "ids": snap.ids,
            "rows": int(labels.shape[0]),
            "params": snap.params,
            "has_faiss": snap.faiss_index is not None,
        },
        separators=(",", ":"),
    ).encode("utf-8")

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(b"\0" * _PREAMBLE.size)
            out = _HashingWriter(fh)
            out.write(header)
            for array in (labels, vectors):
                view = _byte_view(array)
                for start in range(0, view.nbytes, _CHUNK_BYTES):
                    out.write(view[start : start + _CHUNK_BYTES])
            if snap.faiss_index is not None:
                faiss = faiss_module()
                writer = faiss.PyCallbackIOWriter(out.write)
                faiss.write_index(snap.faiss_index, writer)
                del writer  # flushes its buffer into ``out``
            body_len = out.written - len(header)
            fh.seek(0)
            fh.write(
                _PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(header), body_len, out.digest.digest())
            )
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(path.parent)


def read_snapshot(path: Path) -> IndexSnapshot:
    """Read and verify a snapshot; raise ``FaissIndexCorrupt`` on any damage."""
    try:
        with open(path, "rb") as fh:
            return _read(fh, path)
    except OSError as exc:
        raise FaissIndexCorrupt(f"{path}: unreadable ({exc})") from exc


def _read(fh: IO[bytes], path: Path) -> IndexSnapshot:
    size = os.fstat(fh.fileno()).st_size
    preamble = fh.read(_PREAMBLE.size)
    if len(preamble) < _PREAMBLE.size:
        raise FaissIndexCorrupt(f"{path}: truncated ({size} bytes, no complete header)")
    magic, version, header_len, body_len, digest = _PREAMBLE.unpack(preamble)
    if magic != MAGIC:
        raise FaissIndexCorrupt(f"{path}: not a Tandem FAISS index (bad magic)")
    if version != FORMAT_VERSION:
        raise FaissIndexCorrupt(f"{path}: unsupported format version {version}")
    if size != _PREAMBLE.size + header_len + body_len:
        raise FaissIndexCorrupt(
            f"{path}: truncated or padded ({size} bytes, "
            f"expected {_PREAMBLE.size + header_len + body_len})"
        )
    hasher = hashlib.sha256()
    while chunk := fh.read(_CHUNK_BYTES):
        hasher.update(chunk)
    if hasher.digest() != digest:
        raise FaissIndexCorrupt(f"{path}: checksum mismatch")
    fh.seek(_PREAMBLE.size)
    try:
        return _decode(fh, header_len, body_len)
    except (ValueError, KeyError, TypeError, RuntimeError) as exc:
        raise FaissIndexCorrupt(f"{path}: inconsistent contents ({exc})") from exc


def _decode(fh: IO[bytes], header_len: int, body_len: int) -> IndexSnapshot:
    header = json.loads(fh.read(header_len).decode("utf-8"))
    dim, rows = int(header["dimension"]), int(header["rows"])
    ids = header["ids"]
    if dim <= 0 or rows < 0 or not isinstance(ids, list):
        raise ValueError("bad dimension, row count or id table")
    arrays_len = rows * 8 + rows * dim * 4
    has_faiss = bool(header["has_faiss"])
    if body_len < arrays_len or (body_len > arrays_len) != has_faiss:
        raise ValueError(f"body is {body_len} bytes for {rows} rows of dimension {dim}")
    labels = _read_array(fh, np.dtype("<i8"), (rows,)).astype(np.int64, copy=False)
    vectors = _read_array(fh, np.dtype("<f4"), (rows, dim)).astype(np.float32, copy=False)
    if rows and (labels.min() < 0 or labels.max() >= len(ids)):
        raise ValueError("row label outside the id table")
    if len(np.unique(labels)) != rows:
        raise ValueError("duplicate row labels")
    faiss_index = None
    if has_faiss:
        faiss = faiss_module()
        reader = faiss.PyCallbackIOReader(_bounded_reader(fh, body_len - arrays_len))
        faiss_index = faiss.read_index(reader)
        del reader
    return IndexSnapshot(
        dimension=dim,
        ids=[str(i) for i in ids],
        labels=labels,
        vectors=vectors,
        params=dict(header["params"]),
        faiss_index=faiss_index,
    )


def _read_array(fh: IO[bytes], dtype: np.dtype[Any], shape: tuple[int, ...]) -> Any:
    """Read straight into a fresh array (no intermediate bytes object)."""
    array = np.empty(shape, dtype=dtype)
    view = _byte_view(array)
    done = 0
    while done < view.nbytes:
        got = fh.readinto(view[done : done + _CHUNK_BYTES])  # type: ignore[attr-defined]
        if not got:
            raise ValueError("file ended inside the vectors")
        done += got
    return array


def _bounded_reader(fh: IO[bytes], limit: int) -> Callable[[int], bytes]:
    """FAISS's read callback, kept inside the structure's section of the file."""
    left = [limit]

    def read(n: int) -> bytes:
        data = fh.read(min(n, left[0]))
        left[0] -= len(data)
        return data

    return read


def _byte_view(array: npt.NDArray[Any]) -> memoryview:
    """A flat, writable-if-the-array-is byte view of ``array`` (empty arrays included)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).data


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
