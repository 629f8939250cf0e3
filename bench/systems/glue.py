"""The glue a user could write instead of adopting a hybrid engine: bm25s (Snowball
stemmer, English stop words) and a flat FAISS index over the same MiniLM title + text
vectors, the top 100 of each fused by reciprocal rank fusion with k = 60.

Deliberately written the way a user would, from the libraries' documented calls, with no
Tandem code (its RRF is the textbook ``Σ 1 / (k + rank)``, ties by id). The query is
embedded at search time by the shared encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.dataset import BenchDocument
from bench.encoder import Vectors
from bench.systems.base import FUSION_WINDOW, SystemContext, SystemName
from bench.systems.bm25s_raw import Bm25sSystem
from bench.timing import dir_size_bytes

WINDOW = FUSION_WINDOW
RRF_K = 60


class GlueSystem:
    name = SystemName.GLUE
    uses_vectors = True

    def __init__(self, ctx: SystemContext) -> None:
        self._ctx = ctx
        self._bm25 = Bm25sSystem(ctx)
        self._path = ctx.workdir / "glue-faiss" / "flat.index"
        self._index: Any = None
        self._ids: list[str] = []

    def prepare(self) -> None:
        import faiss  # noqa: F401

        self._bm25.prepare()
        self._ctx.encoder().load()

    def index(self, documents: Sequence[BenchDocument], vectors: Vectors | None) -> None:
        import faiss

        if vectors is None or vectors.shape[0] != len(documents):
            raise ValueError("the glue needs one vector per document")
        self._ctx.encoder().load()
        self._bm25.index(documents, None)
        self._index = faiss.IndexFlatIP(int(vectors.shape[1]))
        self._index.add(vectors)
        self._ids = [doc.doc_id for doc in documents]
        self._path.parent.mkdir(parents=True, exist_ok=True)
        faiss.write_index(self._index, str(self._path))

    def search(self, query: str, k: int) -> list[str]:
        if self._index is None:
            raise RuntimeError("search before index")
        keyword = self._bm25.search(query, WINDOW)
        vector = self._ctx.encoder().encode_query(query)
        _scores, rows = self._index.search(vector, min(WINDOW, len(self._ids)))
        dense = [self._ids[int(row)] for row in rows[0] if row >= 0]
        fused: dict[str, float] = {}
        for ranking in (keyword, dense):
            for rank, doc_id in enumerate(ranking, start=1):
                fused[doc_id] = fused.get(doc_id, 0.0) + 1.0 / (RRF_K + rank)
        return sorted(fused, key=lambda doc_id: (-fused[doc_id], doc_id))[:k]

    def disk_bytes(self) -> int:
        return self._bm25.disk_bytes() + dir_size_bytes(self._path)

    def close(self) -> None:
        self._bm25.close()
        self._index = None
