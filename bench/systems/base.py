"""The seam every benchmarked system sits behind."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from bench.dataset import BenchDocument
from bench.encoder import SentenceEncoder, Vectors

FUSION_WINDOW = 100
"""The fusion window the hybrid peers are held to. LanceDB and txtai size their windows
from the limit, so they are called with ``max(k, FUSION_WINDOW)`` whatever ``k`` the
caller asks for and cut to ``k``: LanceDB's limit is each arm's window (100 per arm);
txtai's hybrid search asks each index for ten times its limit, so it fuses 1,000 per arm.
The glue takes this many candidates per arm whatever ``k``, and Tandem (called with
``top_k=k``) fuses its default window, also 100, whatever ``k`` up to it. Every hybrid
system's top 10 is thus the head of its top 100 (one configuration scored and timed)."""


class SystemName(enum.StrEnum):
    """Every system the benchmark knows, in report order."""

    TANDEM_HYBRID = "tandem-hybrid"
    TANDEM_HYBRID_ZSCORE = "tandem-hybrid-zscore"
    TANDEM_HYBRID_WINDOWS = "tandem-hybrid-windows"
    TANDEM_KEYWORD = "tandem-keyword"
    TANTIVY = "tantivy"
    FAISS_FLAT = "faiss-flat"
    BM25S = "bm25s"
    GLUE = "glue"
    LANCEDB_HYBRID = "lancedb-hybrid"
    TXTAI_HYBRID = "txtai-hybrid"

    @classmethod
    def from_str(cls, value: str) -> SystemName:
        try:
            return cls(value.strip())
        except ValueError as exc:
            valid = ", ".join(s.value for s in cls)
            raise ValueError(f"unknown system {value!r}; valid: {valid}") from exc


@dataclass(frozen=True, slots=True)
class SystemContext:
    """What a system may use: its own scratch directory, the model name, the shared encoder.

    ``encoder`` is a loader, not a model: systems that embed nothing never pay for it, and
    Tandem never calls it (it embeds queries inside itself).
    """

    workdir: Path
    model: str
    encoder: Callable[[], SentenceEncoder]


@runtime_checkable
class BenchSystem(Protocol):
    """One retrieval system under test.

    Contract:
    - ``index(documents, vectors)`` ingests the whole corpus once. ``vectors`` are the cached
      corpus embeddings, row ``i`` for ``documents[i]`` (unit rows, float32), or ``None`` for
      systems that declare ``uses_vectors = False``. Systems whose API accepts precomputed
      vectors must use them rather than re-encode.
    - ``search(query, k)`` returns at most ``k`` document ids, best first, embedding the query
      at call time when the system needs a query vector (never from a cache).
    - ``disk_bytes()`` is the size of everything the system persisted (0 if in memory only).
    - ``close()`` releases files and handles; it is called once, after the last search.
    - ``prepare()`` imports the system's libraries and loads any model it needs, before
      ``index`` is timed: one-time loads are not indexing (bm25s's import alone took a
      quarter of a second, half of its index time on Cranfield).
    """

    name: SystemName
    uses_vectors: bool

    def prepare(self) -> None: ...

    def index(self, documents: Sequence[BenchDocument], vectors: Vectors | None) -> None: ...

    def search(self, query: str, k: int) -> list[str]: ...

    def disk_bytes(self) -> int: ...

    def close(self) -> None: ...
