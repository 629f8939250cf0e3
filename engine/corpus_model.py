"""The config and embedder a corpus works with, and the ways they change.

``Corpus`` writes with ``CorpusModel.config`` and ``.embedder`` (through ``.ingestor``) and
searches with the snapshot its ``Searcher`` holds. The two part only while a change is
under way: an embedder switch in this process searches from keywords until its
re-embedding pass ends, while the new config is already the one written with; and a
config another process wrote (its switch) is adopted once its model builds here — until
then searches answer from keywords and writes raise (``CorpusSync`` retries).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dense import Embedder, EmbedderUnavailable
from engine.config import STORED, CorpusConfig, EmbedderSpec
from engine.dimension_guard import DimensionGuard
from engine.embedders import build_embedder
from engine.metrics import EngineMetrics
from engine.natural.questions import CorpusQuestions
from engine.search.searcher import Searcher
from engine.storage import DocumentStore
from engine.write.indexes import DerivedIndexes
from engine.write.ingest import Ingestor

logger = logging.getLogger(__name__)


def guarded(embedder: Embedder, indexes: DerivedIndexes) -> Embedder:
    """``embedder`` with its output checked against the corpus's vector index (or, while
    it holds none, the length its sharded corpus's coordinator said)."""

    def expected() -> int | None:
        return indexes.vector_length

    return DimensionGuard(embedder, expected)


class CorpusModel:
    """What a corpus writes with (``config``, ``embedder``, ``ingestor``) and how the
    search state follows it. ``embedder`` comes guarded (``guarded``)."""

    def __init__(
        self,
        directory: Path,
        config: CorpusConfig,
        embedder: Embedder | None,
        *,
        store: DocumentStore,
        indexes: DerivedIndexes,
        searcher: Searcher,
        questions: CorpusQuestions,
        metrics: EngineMetrics,
        embedder_for: Callable[[EmbedderSpec], Embedder] | None,
    ) -> None:
        self._dir = directory
        self._store = store
        self._indexes = indexes
        self._searcher = searcher
        self._questions = questions
        self._metrics = metrics
        self._embedder_for = embedder_for
        self.config = config
        self.embedder = embedder
        self.ingestor = Ingestor(config.name, store, indexes, embedder, metrics, config.fields)

    def guard(self, embedder: Embedder) -> Embedder:
        return guarded(embedder, self._indexes)

    def write_with(self, config: CorpusConfig, embedder: Embedder | None) -> None:
        """Writes and questions use ``config`` and ``embedder`` from now on (searches
        follow when ``search_with`` installs a new search state)."""
        self.config = config
        self.embedder = embedder
        self.ingestor = Ingestor(
            config.name, self._store, self._indexes, embedder, self._metrics, config.fields
        )
        self._questions.reset()

    def search_with(self, **changes: Any) -> None:
        """Searches from now on use the current search state with ``changes`` (fields of
        ``SearchState``), installed whole."""
        self._searcher.install(dataclasses.replace(self._searcher.state, **changes))

    def search_as_written(self) -> None:
        """Searches use the config and embedder writes use (undoes the keyword-only state
        a failed adoption installed, once there is nothing new to adopt)."""
        state = self._searcher.state
        if state.config != self.config or state.embedder is not self.embedder:
            self.search_with(config=self.config, embedder=self.embedder)

    def adopt_written_config(self) -> None:
        """Another process changed ``config.json`` (an embedder switch): search and write
        with the new config and embedder from now on. (Its vectors arrive through the
        store: the switch's new epoch made this process's vector index start over.)"""
        try:
            raw = json.loads((self._dir / "config.json").read_text("utf-8"))
            config = CorpusConfig.model_validate(raw, context=STORED)
        except (OSError, ValueError) as exc:
            logger.warning("corpus config unreadable (%s); keeping the one loaded", type(exc))
            self.search_as_written()
            return
        if config == self.config:
            self.search_as_written()  # e.g. switched back before a failed adoption
            return
        embedder: Embedder | None = None
        if config.embedder is not None and self.embedder is not None:
            spec = config.embedder
            try:
                found = self._embedder_for(spec) if self._embedder_for else build_embedder(spec)
            except Exception:
                # The new model does not build here (yet): searches answer from keywords
                # rather than embed queries with the old model; writes wait for it (the
                # caller keeps the config pending and retries, see ``CorpusSync``).
                self.search_with(config=config, embedder=None)
                raise
            embedder = self.guard(found)
        self.write_with(config, embedder)
        self.search_with(config=config, embedder=embedder)
        logger.info("corpus %s: config changed by another process; adopted", config.name)

    def vector_dimension(self) -> int | None:
        """The length supplied vectors must have: the vector index's, else the model's
        (loading it if need be); ``None`` while neither can say (provider down)."""
        length = self._indexes.vector_length
        if length is not None:
            return length
        if self.embedder is None:
            return None
        try:
            return self.embedder.dimension
        except EmbedderUnavailable:
            return None

    def model_names(self) -> list[str]:
        """The names the corpus's model goes by (the provider's, the config's)."""
        names = [] if self.embedder is None else [self.embedder.name]
        if self.config.embedder is not None:
            names.append(self.config.embedder.model)
        return names
