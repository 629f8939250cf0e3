"""The on-disk format of a ``FaissIndex``: written atomically, checksummed, memory-mapped.

Layout (integers little-endian, every section 64-byte aligned)::

    graph      the FAISS structure (IndexIDMap over IndexHNSW*), when the index has one:
               first, because FAISS memory-maps a structure from the start of a file
    sections   base_labels int64[B] | base_alive uint8[B] | base_vectors float32[B, d]
               (absent when a float32 graph stores them) | tail_labels int64[T] |
               tail_vectors float32[T, d]
    header     JSON: dimension, id table (label order), params, storage kind, and for the
               graph and each section its offset, length and sha256
    trailer    magic b"TNDMFAIS" | version u32 | header offset u64 | header length u64 |
               file length u64 | sha256(header) 32 bytes

The base rows are the ones a graph covers (retired rows included: the graph still holds
them); the tail holds the live rows added since. Without a graph every live row is base.

Opening. The trailer, the header and the small sections (labels, retired-row mask) are
verified against their sha256 before anything is used. The large sections — vectors and
the graph — are then memory-mapped, not read: a million 384-d vectors reopen in the time
it takes to parse the id table. The graph's array lengths are checked against its
section before FAISS reads them (``dense._graph_layout``: FAISS allocates what a length
says before reading), and the graph is then checked structurally (every count, offset
and neighbour id in range) so that walking it is memory-safe whatever the disk returned;
the large sections' digests are checked at once when they are small
(``VERIFY_AT_OPEN_BYTES``) and otherwise by ``Verification.run`` — the index runs it on
its background thread — since hashing gigabytes would dominate a reopen. Any mismatch
raises (or reports) ``FaissIndexCorrupt`` so the caller can rebuild from its store.

Saving streams the live arrays in 16 MiB pieces (hashing as it goes) and lets FAISS write
its structure through a callback: no part of the index is ever copied in memory.

A mapped section remembers the digest its file recorded for it. The map shows whatever
the file holds now, so a file overwritten in place (``rsync --inplace``, a stray tool, a
failing disk) changes the vectors under a running index; a save that copied them would
seal the damage under fresh digests and the next open would trust it. So when a save
streams a mapped section whole, the digest computed on the way must match the recorded
one, and any other mapped section the save read from (``write_snapshot``'s ``sources``)
is hashed again; on a mismatch the save raises ``FaissIndexCorrupt`` and leaves the old
file in place, for the caller to rebuild from its store. (A file truncated under the map
cannot be caught this way: touching a page past its end kills the process with SIGBUS.)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

from dense._graph import Graph, VectorStorage, load_graph
from dense._row_reader import RowReader
from dense._vector_store import Labels, Mask, Vectors
from dense.contracts import DenseError

MAGIC = b"TNDMFAIS"
FORMAT_VERSION = 3  # 2 kept the vectors twice and read them all at open
_TRAILER = struct.Struct("<8sIQQQ32s")
_ALIGN = 64
_CHUNK_BYTES = 16 << 20
VERIFY_AT_OPEN_BYTES = 64 << 20  # larger vector/graph sections are hashed after opening
_SMALL = ("base_labels", "base_alive", "tail_labels")


class FaissIndexCorrupt(DenseError):
    """A saved index file is truncated, damaged or of an unknown format."""


class _MappedSection(np.memmap):  # type: ignore[type-arg]
    """A vector section mapped from a file, with the sha256 the file recorded for it.
    Views and copies are plain sections of unknown origin (the class default)."""

    sha256: str | None = None


@dataclass(frozen=True)
class IndexSnapshot:
    """Everything a ``FaissIndex`` needs to come back as it was saved.

    Saving, the arrays are views of the live index. Loading, ``base_vectors`` is a
    read-only memory map (or the graph's own storage), the rest are fresh arrays.
    """

    dimension: int
    ids: list[str]  # position = int64 label; with a graph, ids of its retired rows too
    base_labels: Labels
    base_alive: Mask
    base_vectors: Vectors
    tail_labels: Labels
    tail_vectors: Vectors
    params: dict[str, Any] = field(default_factory=dict)
    storage: VectorStorage = VectorStorage.FLOAT32
    graph: Graph | None = None
    keepalive: object = None  # what owns base_vectors' memory when loaded
    base_reader: RowReader | None = None  # reads base rows without the map (when mapped)
    origin: dict[str, Any] | None = None  # the saver's note of what the file reflects


@dataclass(frozen=True)
class Verification:
    """Digests of the large sections, to check after opening (see the module doc)."""

    path: Path
    spans: tuple[tuple[str, int, int, str], ...]  # name, offset, length, sha256 hex

    def run(self, proceed: Any = None) -> None:
        """Hash the sections; ``FaissIndexCorrupt`` on a mismatch. ``proceed()``
        returning False (a closing index) stops early without a verdict."""
        try:
            with open(self.path, "rb") as fh:
                for name, offset, length, digest in self.spans:
                    got = _sha256_span(fh, offset, length, proceed)
                    if got is None:
                        return
                    if got != digest:
                        raise FaissIndexCorrupt(f"{self.path}: {name} checksum mismatch")
        except OSError as exc:
            raise FaissIndexCorrupt(f"{self.path}: unreadable ({exc})") from exc


# ---------------------------------------------------------------------------- writing
class _HashingWriter:
    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.digest = hashlib.sha256()
        self.position = 0

    def write(self, data: bytes | memoryview) -> int:
        self.digest.update(data)
        self._fh.write(data)
        self.position += len(data) if isinstance(data, bytes) else data.nbytes
        return self.position

    def restart(self) -> None:
        self.digest = hashlib.sha256()

    def pad(self) -> None:
        gap = -self.position % _ALIGN
        if gap:
            self._fh.write(b"\0" * gap)
            self.position += gap


def write_snapshot(
    path: Path, snap: IndexSnapshot, *, sources: Sequence[object] = ()
) -> dict[str, int]:
    """Write ``snap`` to ``path`` atomically: temp file in the same dir, fsync, rename.
    Returns each section's offset in the file.

    ``sources``: arrays the snapshot's sections were read from (e.g. the base a gathered
    view selects rows of). Those that are mapped sections, and any mapped section
    streamed whole, are checked against the digests their files recorded once written;
    ``FaissIndexCorrupt`` on a mismatch, and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            offsets, checked = _write(fh, snap)
            for source in sources:  # after the copy: damage read before now shows up
                if not any(source is done for done in checked):
                    _check_mapped(source)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(path.parent)
    return offsets


def map_vectors(path: Path, offset: int, shape: tuple[int, int]) -> tuple[Vectors, RowReader]:
    """A read-only memory map of a vector section of a file written here, and a reader of
    its rows that does not go through the map (``dense._row_reader``). The map keeps the
    digest the file's header records for the section, for later saves to check (none
    when the file has no readable header: a bare array)."""
    path = Path(path)
    with open(path, "rb") as fh:
        return _map_with_reader(fh, offset, shape, _recorded_digest(fh, path, offset, shape))


def _recorded_digest(fh: IO[bytes], path: Path, offset: int, shape: tuple[int, int]) -> str | None:
    try:
        header, _size = _read_header(fh, path)
        sections = header["sections"].values()
        length = shape[0] * shape[1] * 4
        return next(
            (str(s[2]) for s in sections if int(s[0]) == offset and int(s[1]) == length), None
        )
    except (FaissIndexCorrupt, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def _write(fh: IO[bytes], snap: IndexSnapshot) -> tuple[dict[str, int], list[object]]:
    """Returns the offsets and the mapped sections it streamed whole and checked."""
    out = _HashingWriter(fh)
    spans: dict[str, list[Any]] = {}
    if snap.graph is not None:
        snap.graph.write(out.write)
        spans["graph"] = [0, out.position, out.digest.hexdigest()]
        out.pad()
    arrays: list[tuple[str, npt.NDArray[Any]]] = [
        ("base_labels", np.ascontiguousarray(snap.base_labels, dtype="<i8")),
        ("base_alive", np.ascontiguousarray(snap.base_alive, dtype=np.uint8)),
    ]
    floats_in_graph = snap.graph is not None and snap.storage is VectorStorage.FLOAT32
    if not floats_in_graph:
        arrays.append(("base_vectors", snap.base_vectors))
    arrays += [
        ("tail_labels", np.ascontiguousarray(snap.tail_labels, dtype="<i8")),
        ("tail_vectors", snap.tail_vectors),
    ]
    checked: list[object] = []
    for name, array in arrays:
        out.restart()
        start = out.position
        for piece in _pieces(array):
            out.write(piece)
        spans[name] = [start, out.position - start, out.digest.hexdigest()]
        recorded = _mapped_digest(array)
        if recorded is not None:  # the unchanged mapped section: must read as it was
            _compare(array, recorded, spans[name][2])
            checked.append(array)
        out.pad()
    header = json.dumps(
        {
            "dimension": snap.dimension,
            "ids": snap.ids,
            "base_rows": int(snap.base_labels.shape[0]),
            "tail_rows": int(snap.tail_labels.shape[0]),
            "params": snap.params,
            "storage": snap.storage.value,
            "sections": spans,
            # Absent when ``None``: older readers read the keys they know and skip it.
            **({} if snap.origin is None else {"origin": snap.origin}),
        },
        separators=(",", ":"),
    ).encode("utf-8")
    header_at = out.position
    fh.write(header)
    end = header_at + len(header) + _TRAILER.size
    fh.write(
        _TRAILER.pack(
            MAGIC, FORMAT_VERSION, header_at, len(header), end, hashlib.sha256(header).digest()
        )
    )
    return {name: int(span[0]) for name, span in spans.items()}, checked


def _mapped_digest(array: object) -> str | None:
    return array.sha256 if isinstance(array, _MappedSection) else None


def _check_mapped(array: object) -> None:
    """Hash a mapped section through its map; ``FaissIndexCorrupt`` if its file no
    longer holds what it recorded (nothing to check for any other array)."""
    if not isinstance(array, _MappedSection) or array.sha256 is None:
        return
    hasher = hashlib.sha256()
    for piece in _pieces(array):
        hasher.update(piece)
    _compare(array, array.sha256, hasher.hexdigest())


def _compare(array: object, recorded: str, got: str) -> None:
    if got != recorded:
        where = getattr(array, "filename", None) or "a mapped index file"
        raise FaissIndexCorrupt(
            f"{where}: vectors changed on disk while mapped (checksum mismatch); not saving them"
        )


def _pieces(array: npt.NDArray[Any]) -> Iterator[memoryview]:
    """The array's bytes in 16 MiB pieces, converting row blocks only if it must."""
    rows = array.shape[0] if array.ndim else 0
    if rows == 0:
        return
    row_bytes = max(1, array.nbytes // rows)
    step = max(1, _CHUNK_BYTES // row_bytes)
    little = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    for start in range(0, rows, step):
        block = np.ascontiguousarray(array[start : start + step], dtype=little)
        yield block.reshape(-1).view(np.uint8).data


# ---------------------------------------------------------------------------- reading
def read_snapshot(path: Path) -> tuple[IndexSnapshot, Verification]:
    """Open a saved index (see the module doc); ``FaissIndexCorrupt`` on any damage."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            header, size = _read_header(fh, path)
            try:
                return _decode(fh, path, header, size)
            except (ValueError, KeyError, TypeError, RuntimeError) as exc:
                raise FaissIndexCorrupt(f"{path}: inconsistent contents ({exc})") from exc
    except OSError as exc:
        raise FaissIndexCorrupt(f"{path}: unreadable ({exc})") from exc


def _read_header(fh: IO[bytes], path: Path) -> tuple[dict[str, Any], int]:
    size = os.fstat(fh.fileno()).st_size
    if size < _TRAILER.size:
        raise FaissIndexCorrupt(f"{path}: truncated ({size} bytes, no trailer)")
    fh.seek(size - _TRAILER.size)
    magic, version, header_at, header_len, end, digest = _TRAILER.unpack(fh.read(_TRAILER.size))
    if magic != MAGIC:
        fh.seek(0)
        lead = fh.read(len(MAGIC) + 4)
        if lead[: len(MAGIC)] == MAGIC:  # formats 1 and 2 began with the magic
            older = int.from_bytes(lead[len(MAGIC) :], "little")
            raise FaissIndexCorrupt(
                f"{path}: written by an older version (format {older}, not {FORMAT_VERSION})"
            )
        raise FaissIndexCorrupt(f"{path}: not a Tandem FAISS index (bad magic)")
    if version != FORMAT_VERSION:
        raise FaissIndexCorrupt(f"{path}: unsupported format version {version}")
    if end != size or header_at + header_len + _TRAILER.size != size:
        raise FaissIndexCorrupt(f"{path}: truncated or padded ({size} bytes, expected {end})")
    fh.seek(header_at)
    raw = fh.read(header_len)
    if hashlib.sha256(raw).digest() != digest:
        raise FaissIndexCorrupt(f"{path}: header checksum mismatch")
    try:
        header = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise FaissIndexCorrupt(f"{path}: unreadable header ({exc})") from exc
    if not isinstance(header, dict):
        raise FaissIndexCorrupt(f"{path}: unreadable header")
    header["_header_at"] = header_at
    return header, size


def _decode(
    fh: IO[bytes], path: Path, header: dict[str, Any], size: int
) -> tuple[IndexSnapshot, Verification]:
    dim, ids = int(header["dimension"]), header["ids"]
    rows_b, rows_t = int(header["base_rows"]), int(header["tail_rows"])
    storage = VectorStorage.from_str(str(header["storage"]))
    if dim <= 0 or rows_b < 0 or rows_t < 0 or not isinstance(ids, list):
        raise ValueError("bad dimension, row count or id table")
    spans: dict[str, tuple[int, int, str]] = {
        name: (int(v[0]), int(v[1]), str(v[2])) for name, v in header["sections"].items()
    }
    limit = int(header["_header_at"])
    for offset, length, _digest in spans.values():
        if offset < 0 or length < 0 or offset + length > limit:
            raise ValueError("section outside the file")
    has_graph = "graph" in spans
    expect = {
        "base_labels": rows_b * 8,
        "base_alive": rows_b,
        "tail_labels": rows_t * 8,
        "tail_vectors": rows_t * dim * 4,
    }
    if not (has_graph and storage is VectorStorage.FLOAT32):
        expect["base_vectors"] = rows_b * dim * 4
    for name, length in expect.items():
        if name not in spans or spans[name][1] != length:
            raise ValueError(f"section {name} missing or of the wrong length")
    for name in _SMALL:
        offset, length, digest = spans[name]
        if _sha256_span(fh, offset, length, None) != digest:
            raise FaissIndexCorrupt(f"{path}: {name} checksum mismatch")
    base_labels = _read(fh, spans["base_labels"], np.dtype("<i8"), (rows_b,)).astype(np.int64)
    base_alive = _read(fh, spans["base_alive"], np.dtype(np.uint8), (rows_b,)).astype(np.bool_)
    tail_labels = _read(fh, spans["tail_labels"], np.dtype("<i8"), (rows_t,)).astype(np.int64)
    large = tuple(
        (name, *spans[name]) for name in ("graph", "base_vectors", "tail_vectors") if name in spans
    )
    verification = Verification(path, large)
    if sum(length for _n, _o, length, _d in large) <= VERIFY_AT_OPEN_BYTES:
        verification.run()
        verification = Verification(path, ())
    graph = None
    if has_graph:
        graph = load_graph(path, storage, base_labels, dim, spans["graph"][1])
    base_reader = None
    if "base_vectors" in spans:
        offset, _length, digest = spans["base_vectors"]
        base_vectors, base_reader = _map_with_reader(fh, offset, (rows_b, dim), digest)
    elif graph is not None:
        base_vectors = graph.float_view()
    else:  # pragma: no cover - excluded by the length checks above
        raise ValueError("no base vectors")
    tail_vectors = _map(path, spans["tail_vectors"][0], (rows_t, dim))
    snap = IndexSnapshot(
        dimension=dim,
        ids=ids,  # strings: the header was checked against its digest
        base_labels=base_labels,
        base_alive=base_alive,
        base_vectors=base_vectors,
        tail_labels=tail_labels,
        tail_vectors=np.array(tail_vectors, dtype=np.float32),
        params=dict(header["params"]),
        storage=storage,
        graph=graph,
        keepalive=graph if "base_vectors" not in spans else base_vectors,
        base_reader=base_reader,
        origin=dict(origin) if isinstance(origin := header.get("origin"), dict) else None,
    )
    return snap, verification


def _read(
    fh: IO[bytes], span: tuple[int, int, str], dtype: np.dtype[Any], shape: tuple[int, ...]
) -> Any:
    fh.seek(span[0])
    data = fh.read(span[1])
    if len(data) != span[1]:
        raise ValueError("file ended inside a section")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _map_with_reader(
    fh: IO[bytes], offset: int, shape: tuple[int, int], sha256: str | None
) -> tuple[Vectors, RowReader]:
    """Map the section of the open file ``fh`` and open a reader on it (same inode as
    the header read through ``fh``: a later save's rename cannot slip between them)."""
    reader = RowReader(os.dup(fh.fileno()), offset, shape)
    if shape[0] == 0:
        return np.zeros(shape, dtype=np.float32), reader
    mapped = _MappedSection(fh, dtype="<f4", mode="r", offset=offset, shape=shape)
    mapped.sha256 = sha256
    return mapped, reader


def _map(path: Path, offset: int, shape: tuple[int, int]) -> Vectors:
    if shape[0] == 0:
        return np.zeros(shape, dtype=np.float32)
    mapped: Vectors = np.memmap(path, dtype="<f4", mode="r", offset=offset, shape=shape)
    return mapped


def _sha256_span(fh: IO[bytes], offset: int, length: int, proceed: Any) -> str | None:
    hasher = hashlib.sha256()
    fh.seek(offset)
    left = length
    while left > 0:
        if proceed is not None and not proceed():
            return None
        chunk = fh.read(min(_CHUNK_BYTES, left))
        if not chunk:
            raise FaissIndexCorrupt(f"file ended inside a section at {offset + length - left}")
        hasher.update(chunk)
        left -= len(chunk)
    return hasher.hexdigest()


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
