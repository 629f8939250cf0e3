"""``SearchableCorpus``: the face a corpus shows, whether it is one directory or sharded.

``engine.Corpus`` (one directory) and ``engine.cluster.ShardedCorpus`` (shards on Ray)
both satisfy it, so code written against it runs against either.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from engine.config import CorpusConfig
from engine.documents import AddResult, Document, GrepMatch, Passage, SourceText
from engine.filters import FilterInput


@runtime_checkable
class SearchableCorpus(Protocol):
    """A searchable collection of documents.

    Contract (``engine.Corpus`` documents each method in full):

    - ``search`` clamps what a user types and never raises for it (only a malformed
      filter raises ``InvalidArgument``); it returns public passages only, best first,
      with no mode and no fallback flag; each passage carries its per-arm ranks.
    - ``add`` validates every document before storing any; when it returns, the
      documents are durable. ``embeddings`` (with ``embedding_model``, checked against
      the corpus's model) supply precomputed vectors. ``delete`` ignores unknown ids.
    - ``fetch_source`` raises ``SourceNotFound`` for unknown or non-public ids;
      ``grep`` reads public text only and raises ``GrepTimeout`` rather than return an
      incomplete scan.
    - Errors raised on purpose derive from ``engine.EngineError``.
    """

    @property
    def name(self) -> str: ...

    @property
    def config(self) -> CorpusConfig: ...

    def __len__(self) -> int: ...

    def search(
        self,
        query: str,
        top_k: int = 10,
        offset: int = 0,
        language_id: int | None = None,
        *,
        filters: FilterInput | None = None,
    ) -> list[Passage]: ...

    def evidence(self, question: str, top_k: int = 5) -> str: ...

    def fetch_source(self, source_id: str) -> SourceText: ...

    def grep(self, pattern: str, limit: int = 20, *, fixed: bool = False) -> list[GrepMatch]: ...

    def add(
        self,
        documents: Iterable[Document],
        *,
        embeddings: object | None = None,
        embedding_model: str | None = None,
        progress: bool | None = None,
    ) -> AddResult: ...

    def delete(self, ids: Iterable[str]) -> int: ...
