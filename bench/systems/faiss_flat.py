"""Raw FAISS: exact inner product (``IndexFlatIP``) over the cached unit vectors; the query
embedded at search time by the shared encoder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.dataset import BenchDocument
from bench.encoder import Vectors
from bench.systems.base import SystemContext, SystemName
from bench.timing import dir_size_bytes


class FaissFlatSystem:
    name = SystemName.FAISS_FLAT
    uses_vectors = True

    def __init__(self, ctx: SystemContext) -> None:
        self._ctx = ctx
        self._path = ctx.workdir / "faiss" / "flat.index"
        self._index: Any = None
        self._ids: list[str] = []

    def prepare(self) -> None:
        import faiss  # noqa: F401

    def index(self, documents: Sequence[BenchDocument], vectors: Vectors | None) -> None:
        import faiss

        if vectors is None or vectors.shape[0] != len(documents):
            raise ValueError("FAISS flat needs one vector per document")
        self._ctx.encoder().load()
        self._index = faiss.IndexFlatIP(int(vectors.shape[1]))
        self._index.add(vectors)
        self._ids = [doc.doc_id for doc in documents]
        self._path.parent.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self._index, str(self._path))

    def search(self, query: str, k: int) -> list[str]:
        if self._index is None:
            raise RuntimeError("search before index")
        vector = self._ctx.encoder().encode_query(query)
        _scores, rows = self._index.search(vector, min(k, len(self._ids)))
        return [self._ids[int(row)] for row in rows[0] if row >= 0]

    def disk_bytes(self) -> int:
        return dir_size_bytes(self._path)

    def close(self) -> None:
        self._index = None
