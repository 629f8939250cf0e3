"""``Corpus.ask``'s wiring: the corpus's ``NaturalSearch``, built on the first question.

Building it opens an HTTP client to the Ollama model, so corpora that are never asked
anything never make one. ``reset`` closes it when the corpus's config changes (an
embedder switch writes a new config) and when the corpus closes.
"""

from __future__ import annotations

import threading

from engine.config import CorpusConfig
from engine.documents import Passage
from engine.filters import Filter, compile_filter
from engine.metrics import EngineMetrics
from engine.natural import (
    Answer,
    NaturalSearch,
    NaturalSearchUnavailable,
    TokenBucketLimiter,
)
from engine.search.searcher import Searcher
from engine.storage import DocumentStore
from sparse import MIN_QUERY_LENGTH


class CorpusQuestions:
    """Natural-language questions for one corpus, answered through its ``Searcher``."""

    def __init__(
        self, name: str, store: DocumentStore, searcher: Searcher, metrics: EngineMetrics
    ) -> None:
        self._name = name
        self._store = store
        self._searcher = searcher
        self._metrics = metrics
        self._natural: NaturalSearch | None = None
        self._lock = threading.Lock()

    def ask(
        self,
        config: CorpusConfig,
        question: str,
        user: str,
        top_k: int,
        language_id: int | None,
    ) -> Answer:
        """See ``Corpus.ask``. A question the model reduces to (almost) no words browses
        the documents its filters allow instead of running an empty search."""
        natural = self._natural_search(config)

        def run(query: str, filters: Filter | None) -> list[Passage]:
            compiled = compile_filter(filters, config.fields)
            if len(query.strip()) < MIN_QUERY_LENGTH:
                return self._searcher.browse(top_k, 0, language_id, compiled)
            return self._searcher.search(query, top_k, 0, language_id, compiled)

        return natural.ask(question, user, run)

    def reset(self) -> None:
        """Close the model client, if one was built; the next question builds a new one."""
        with self._lock:
            if self._natural is not None:
                self._natural.close()
                self._natural = None

    def _natural_search(self, config: CorpusConfig) -> NaturalSearch:
        settings = config.natural
        if settings is None:
            raise NaturalSearchUnavailable(
                f"natural-language questions are off for corpus {self._name!r}; "
                "configure CorpusConfig.natural"
            )
        with self._lock:
            if self._natural is None:
                from engine.natural.ollama_parser import OllamaQuestionParser  # ~0.6 s import

                self._natural = NaturalSearch(
                    self._name,
                    OllamaQuestionParser(settings, config.fields),
                    TokenBucketLimiter(settings.requests_per_minute, settings.bucket_size),
                    self._store,
                    self._metrics,
                )
            return self._natural
