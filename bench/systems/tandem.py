"""Tandem through its public API only: ``SearchEngine`` → ``Corpus.add`` / ``Corpus.search``.

Hybrid: a corpus with the default embedder, fed the cached corpus vectors (the engine
embeds each query itself), with the default fusion (RRF) or ``fusion="zscore"`` (its
default dense weight); ``tandem-hybrid-windows`` is the default with
``complete_windows=False`` (the two windows fused as they are), to show in one run what
completion gains and costs. Keyword: a corpus with ``embedder=None``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.dataset import BenchDocument
from bench.encoder import Vectors
from bench.errors import SystemUnavailable
from bench.systems.base import SystemContext, SystemName
from bench.timing import dir_size_bytes

ADD_BATCH = 10_000
CORPUS_NAME = "bench"
WARM_CORPUS_NAME = "warm-up"


def engine_api() -> Any:
    """The ``engine`` module, or ``SystemUnavailable`` while it does not export the API."""
    try:
        import engine
        from engine import CorpusConfig, Document, SearchEngine  # noqa: F401
    except ImportError as exc:
        raise SystemUnavailable(f"engine public API not importable: {exc}") from exc
    return engine


def to_engine_documents(api: Any, documents: Sequence[BenchDocument]) -> list[Any]:
    return [api.Document(id=d.doc_id, title=d.title, text=d.text, url="") for d in documents]


class TandemSystem:
    """Tandem hybrid (``hybrid=True``) or Tandem keyword (vector off); ``fusion`` names a
    non-default fusion (``CorpusConfig(fusion=...)``) for the hybrid corpus."""

    def __init__(
        self,
        ctx: SystemContext,
        hybrid: bool,
        fusion: str | None = None,
        complete_windows: bool = True,
    ) -> None:
        self._api = engine_api()
        self._ctx = ctx
        self._hybrid = hybrid
        self._fusion = fusion
        self._complete = complete_windows
        if not hybrid:
            self.name = SystemName.TANDEM_KEYWORD
        elif fusion == "zscore" and complete_windows:
            self.name = SystemName.TANDEM_HYBRID_ZSCORE
        elif fusion is None:
            windows = SystemName.TANDEM_HYBRID_WINDOWS
            self.name = SystemName.TANDEM_HYBRID if complete_windows else windows
        else:
            raise ValueError(f"no bench system for fusion {fusion!r}")
        self.uses_vectors = hybrid
        self._engine: Any = None
        self._corpus: Any = None

    def _open_engine(self) -> Any:
        if self._engine is None:
            self._engine = self._api.SearchEngine(str(self._ctx.workdir / "tandem"))
        return self._engine

    def _open(self) -> Any:
        if self._corpus is None:
            engine = self._open_engine()
            fields: dict[str, object] = {
                "name": CORPUS_NAME,
                "embedder": self._ctx.model if self._hybrid else None,
            }
            if self._fusion is not None:
                fields["fusion"] = self._fusion
            if not self._complete:
                fields["complete_windows"] = False
            config = self._api.CorpusConfig.model_validate(fields)
            self._corpus = engine.create_corpus(config)
        return self._corpus

    def prepare(self) -> None:
        """The engine is opened and, for a hybrid corpus, its query model loaded (as a
        server does before it is ready) through a corpus of its own, kept open so that
        the model stays loaded: the model's load is not indexing. The bench corpus is
        created in ``index``, on the clock, as every peer's store is."""
        engine = self._open_engine()
        if self._hybrid:
            warm = self._api.CorpusConfig.model_validate(
                {"name": WARM_CORPUS_NAME, "embedder": self._ctx.model}
            )
            engine.create_corpus(warm)._warm_up()

    def index(self, documents: Sequence[BenchDocument], vectors: Vectors | None) -> None:
        if self._hybrid and vectors is None:
            raise ValueError("Tandem hybrid needs the corpus vectors")
        corpus = self._open()
        for start in range(0, len(documents), ADD_BATCH):
            chunk = documents[start : start + ADD_BATCH]
            embeddings = None
            if self._hybrid and vectors is not None:
                embeddings = vectors[start : start + len(chunk)]
            corpus.add(to_engine_documents(self._api, chunk), embeddings=embeddings, progress=False)

    def index_with_own_encoding(self, documents: Sequence[BenchDocument]) -> None:
        """Ingest letting Tandem embed the documents itself (the ingest-throughput target)."""
        corpus = self._open()
        for start in range(0, len(documents), ADD_BATCH):
            corpus.add(
                to_engine_documents(self._api, documents[start : start + ADD_BATCH]),
                progress=False,
            )

    def search(self, query: str, k: int) -> list[str]:
        return [hit.source_id for hit in self._open().search(query, top_k=k)]

    def disk_bytes(self) -> int:
        """The bench corpus's directory (not the warm-up corpus beside it)."""
        return dir_size_bytes(self._ctx.workdir / "tandem" / "corpora" / CORPUS_NAME)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
            self._corpus = None


def tandem_hybrid(ctx: SystemContext) -> TandemSystem:
    return TandemSystem(ctx, hybrid=True)


def tandem_hybrid_zscore(ctx: SystemContext) -> TandemSystem:
    return TandemSystem(ctx, hybrid=True, fusion="zscore")


def tandem_hybrid_windows(ctx: SystemContext) -> TandemSystem:
    return TandemSystem(ctx, hybrid=True, complete_windows=False)


def tandem_keyword(ctx: SystemContext) -> TandemSystem:
    return TandemSystem(ctx, hybrid=False)


def tandem_for(ctx: SystemContext, name: SystemName) -> TandemSystem:
    """The Tandem system called ``name``."""
    factories = {
        SystemName.TANDEM_HYBRID: tandem_hybrid,
        SystemName.TANDEM_HYBRID_ZSCORE: tandem_hybrid_zscore,
        SystemName.TANDEM_HYBRID_WINDOWS: tandem_hybrid_windows,
        SystemName.TANDEM_KEYWORD: tandem_keyword,
    }
    return factories[name](ctx)
