"""The on-disk format of a ``FaissIndex``: checksummed, written atomically.

Layout (all integers little-endian)::

    magic      8 bytes   b"TNDMFAIS"
    version    u32       FORMAT_VERSION
    header_len u64       length of the JSON header
    body_len   u64       length of the binary body
    digest     32 bytes  sha256(header + body)
    header     JSON      dimension, id table (label order), row count, params, faiss_len
    body       labels int64[rows] | vectors float32[rows, dimension] | faiss bytes

The vectors are the source of truth; the serialised FAISS structure (HNSW only) is a
cache that saves a rebuild. Any mismatch in magic, version, lengths, digest or shapes
raises ``FaissIndexCorrupt`` so the caller can rebuild from its document store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dense.contracts import DenseError

MAGIC = b"TNDMFAIS"
FORMAT_VERSION = 1
_PREAMBLE = struct.Struct("<8sIQQ32s")
_CHUNK_BYTES = 16 << 20  # hash and write in 16 MiB pieces


class FaissIndexCorrupt(DenseError):
    """A saved index file is truncated, damaged or of an unknown format."""


Buffer = bytes | memoryview | npt.NDArray[np.uint8]


@dataclass(frozen=True)
class IndexSnapshot:
    """Everything a ``FaissIndex`` needs to come back exactly as it was saved.

    The arrays may be views (of the live index while saving, of the mapped file while
    loading): a snapshot is consumed at once, never kept.
    """

    dimension: int
    ids: list[str]  # position = int64 label; includes removed ids (labels stay stable)
    labels: npt.NDArray[np.int64]  # label of each stored row
    vectors: npt.NDArray[np.float32]  # (rows, dimension)
    params: dict[str, Any] = field(default_factory=dict)
    faiss_bytes: Buffer | None = None


def write_snapshot(path: Path, snap: IndexSnapshot) -> None:
    """Write ``snap`` to ``path`` atomically: temp file in the same dir, fsync, rename.

    Streams: the parts are written and hashed one by one, and the preamble (which holds
    the digest) is written last, over a placeholder. Nothing is concatenated in memory,
    so saving a million 384-d vectors costs no extra gigabytes.
    """
    labels = np.ascontiguousarray(snap.labels, dtype="<i8")
    vectors = np.ascontiguousarray(snap.vectors, dtype="<f4")
    faiss_view = _byte_view(snap.faiss_bytes) if snap.faiss_bytes is not None else None
    header = json.dumps(
        {
            "dimension": snap.dimension,
            "ids": snap.ids,
            "rows": int(labels.shape[0]),
            "params": snap.params,
            "faiss_len": faiss_view.nbytes if faiss_view is not None else None,
        },
        separators=(",", ":"),
    ).encode("utf-8")
    parts = [_byte_view(labels), _byte_view(vectors)]
    if faiss_view is not None:
        parts.append(faiss_view)
    body_len = sum(part.nbytes for part in parts)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(b"\0" * _PREAMBLE.size)
            digest = hashlib.sha256(header)
            fh.write(header)
            for part in parts:
                for start in range(0, part.nbytes, _CHUNK_BYTES):
                    chunk = part[start : start + _CHUNK_BYTES]
                    digest.update(chunk)
                    fh.write(chunk)
            fh.seek(0)
            fh.write(_PREAMBLE.pack(MAGIC, FORMAT_VERSION, len(header), body_len, digest.digest()))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(path.parent)


def read_snapshot(path: Path) -> IndexSnapshot:
    """Read and verify a snapshot; raise ``FaissIndexCorrupt`` on any damage.

    The file is memory-mapped, not read into a bytes object: the returned arrays are
    views of the mapping (the caller copies what it keeps).
    """
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            data: mmap.mmap | bytes = (
                mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
            )
    except (OSError, ValueError) as exc:
        raise FaissIndexCorrupt(f"{path}: unreadable ({exc})") from exc
    if len(data) < _PREAMBLE.size:
        raise FaissIndexCorrupt(f"{path}: truncated ({len(data)} bytes, no complete header)")
    magic, version, header_len, body_len, digest = _PREAMBLE.unpack_from(data)
    if magic != MAGIC:
        raise FaissIndexCorrupt(f"{path}: not a Tandem FAISS index (bad magic)")
    if version != FORMAT_VERSION:
        raise FaissIndexCorrupt(f"{path}: unsupported format version {version}")
    start = _PREAMBLE.size
    if len(data) != start + header_len + body_len:
        raise FaissIndexCorrupt(
            f"{path}: truncated or padded ({len(data)} bytes, "
            f"expected {start + header_len + body_len})"
        )
    payload = memoryview(data)[start:]
    hasher = hashlib.sha256()
    for offset in range(0, len(payload), _CHUNK_BYTES):
        hasher.update(payload[offset : offset + _CHUNK_BYTES])
    if hasher.digest() != digest:
        raise FaissIndexCorrupt(f"{path}: checksum mismatch")
    try:
        return _decode(bytes(payload[:header_len]), payload[header_len:])
    except (ValueError, KeyError, TypeError) as exc:
        raise FaissIndexCorrupt(f"{path}: inconsistent contents ({exc})") from exc


def _decode(header_bytes: bytes, body: memoryview) -> IndexSnapshot:
    header = json.loads(header_bytes.decode("utf-8"))
    dim, rows = int(header["dimension"]), int(header["rows"])
    ids = header["ids"]
    if dim <= 0 or rows < 0 or not isinstance(ids, list):
        raise ValueError("bad dimension, row count or id table")
    labels_end = rows * 8
    vectors_end = labels_end + rows * dim * 4
    faiss_len = header["faiss_len"]
    expected = vectors_end + (faiss_len or 0)
    if len(body) != expected:
        raise ValueError(f"body is {len(body)} bytes, expected {expected}")
    labels = np.frombuffer(body[:labels_end], dtype="<i8").astype(np.int64)
    vectors = np.frombuffer(body[labels_end:vectors_end], dtype="<f4").reshape(rows, dim)
    if rows and (labels.min() < 0 or labels.max() >= len(ids)):
        raise ValueError("row label outside the id table")
    if len(np.unique(labels)) != rows:
        raise ValueError("duplicate row labels")
    return IndexSnapshot(
        dimension=dim,
        ids=[str(i) for i in ids],
        labels=labels,
        vectors=vectors,
        params=dict(header["params"]),
        faiss_bytes=body[vectors_end:] if faiss_len is not None else None,
    )


def _byte_view(buffer: Buffer | npt.NDArray[Any]) -> memoryview:
    """A flat byte view of ``buffer`` without copying (empty arrays included)."""
    array = np.frombuffer(buffer, dtype=np.uint8) if not isinstance(buffer, np.ndarray) else buffer
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
