"""LanceDB hybrid search as its documentation shows it: a table holding the text and the
precomputed vectors, ``create_fts_index("text")``, and
``search(query_type="hybrid").vector(v).text(q).rerank(RRFReranker())`` — the vector handed
in explicitly because the corpus vectors are precomputed (LanceDB's "bring your own
vectors" path); the query is embedded at search time by the shared encoder."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

from bench.dataset import BenchDocument
from bench.encoder import Vectors
from bench.systems.base import FUSION_WINDOW, SystemContext, SystemName
from bench.timing import dir_size_bytes

TABLE = "bench"


class LanceDbHybridSystem:
    name = SystemName.LANCEDB_HYBRID
    uses_vectors = True

    def __init__(self, ctx: SystemContext) -> None:
        # Lance logs a deprecation warning per query when columns are selected; keep the
        # benchmark output readable (an explicit LANCEDB_LOG from the caller still wins).
        # Read when the library loads, so before the import, which stays out of the timed
        # index.
        os.environ.setdefault("LANCEDB_LOG", "error")
        import lancedb  # noqa: F401

        self._ctx = ctx
        self._path = ctx.workdir / "lancedb"
        self._table: Any = None
        self._reranker: Any = None

    def prepare(self) -> None:
        """Nothing more: the library is imported when the system is built."""

    def index(self, documents: Sequence[BenchDocument], vectors: Vectors | None) -> None:
        import lancedb
        import pyarrow as pa
        from lancedb.rerankers import RRFReranker

        if vectors is None or vectors.shape[0] != len(documents):
            raise ValueError("LanceDB hybrid needs one vector per document")
        self._ctx.encoder().load()
        dim = int(vectors.shape[1])
        data = pa.table(
            {
                "doc_id": pa.array([d.doc_id for d in documents], pa.string()),
                "text": pa.array([d.full_text for d in documents], pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(
                    pa.array(vectors.reshape(-1), pa.float32()), dim
                ),
            }
        )
        db = lancedb.connect(str(self._path))
        self._table = db.create_table(TABLE, data=data, mode="overwrite")
        with warnings.catch_warnings():  # the sync API the docs show is flagged deprecated
            warnings.simplefilter("ignore")
            self._table.create_fts_index("text", replace=True)
        self._reranker = RRFReranker()

    def search(self, query: str, k: int) -> list[str]:
        if self._table is None:
            raise RuntimeError("search before index")
        vector = self._ctx.encoder().encode_query(query)[0]
        rows = (
            self._table.search(query_type="hybrid")
            .vector(vector)
            .text(query)
            .rerank(reranker=self._reranker)
            .select(["doc_id"])
            .limit(max(k, FUSION_WINDOW))  # the limit is each arm's window too
            .to_list()
        )
        return [str(row["doc_id"]) for row in rows[:k]]

    def disk_bytes(self) -> int:
        return dir_size_bytes(self._path)

    def close(self) -> None:
        self._table = None
