"""Raw tantivy, the plain documented way: ``title`` + ``body`` text fields with the
``en_stem`` tokenizer, BM25, the query parsed over both fields (leniently, so that user
punctuation never fails a query)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.dataset import BenchDocument
from bench.encoder import Vectors
from bench.systems.base import SystemContext, SystemName
from bench.timing import dir_size_bytes

WRITER_HEAP_BYTES = 128 * 1024 * 1024


class TantivySystem:
    name = SystemName.TANTIVY
    uses_vectors = False

    def __init__(self, ctx: SystemContext) -> None:
        self._path = ctx.workdir / "tantivy"
        self._index: Any = None
        self._searcher: Any = None

    def prepare(self) -> None:
        import tantivy  # noqa: F401

    def index(self, documents: Sequence[BenchDocument], vectors: Vectors | None) -> None:
        import tantivy

        builder = tantivy.SchemaBuilder()
        builder.add_text_field("id", stored=True, tokenizer_name="raw")
        builder.add_text_field("title", stored=True, tokenizer_name="en_stem")
        builder.add_text_field("body", stored=True, tokenizer_name="en_stem")
        schema = builder.build()
        self._path.mkdir(parents=True, exist_ok=True)
        self._index = tantivy.Index(schema, path=str(self._path))
        writer = self._index.writer(WRITER_HEAP_BYTES)
        for doc in documents:
            writer.add_document(tantivy.Document(id=doc.doc_id, title=doc.title, body=doc.text))
        writer.commit()
        writer.wait_merging_threads()
        self._index.reload()
        self._searcher = self._index.searcher()

    def search(self, query: str, k: int) -> list[str]:
        if self._searcher is None:
            raise RuntimeError("search before index")
        parsed, _errors = self._index.parse_query_lenient(query, ["title", "body"])
        hits = self._searcher.search(parsed, k).hits
        return [str(self._searcher.doc(address)["id"][0]) for _score, address in hits]

    def disk_bytes(self) -> int:
        return dir_size_bytes(self._path)

    def close(self) -> None:
        self._searcher = None
        self._index = None
