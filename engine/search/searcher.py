"""One search, end to end: clamp, route, run the arms, fuse, build passages.

Every answer is built the same way whichever strategy ran — fused by the corpus's
``fusion`` (``engine.search.fusing``; one arm alone yields its own order) and checked
against the store for visibility (``engine.search.passages``) — so nothing in a ``Passage``
reveals the strategy.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dense import Embedder, EmbedderUnavailable
from engine.config import CorpusConfig
from engine.documents import Passage
from engine.limits import MAX_LANGUAGE_ID, MAX_TOP_K, clamp_int, page_start
from engine.metrics import EngineMetrics
from engine.search.completion import complete_windows
from engine.search.embed_deadline import (
    DEFAULT_QUERY_EMBED_TIMEOUT_S,
    EmbedDeadline,
    EmbedderDown,
    QueryEmbedTimeout,
)
from engine.search.fusing import fuse_arms, hybrid_window, keyword_only_window, paged_ranking
from engine.search.passages import build_passages
from engine.search.ranked import Ranked, Ranking, refilled, without
from engine.search.router import reported_up, resolve_strategy
from engine.search.strategy import Arm, FallbackReason, Strategy
from engine.search.visibility import DenseVisibility
from engine.search.windows import (
    ArmWindow,
    completion_windows,
    keyword_scores,
    keyword_window,
    vector_scores,
    vector_window,
)
from engine.storage import DocumentStore
from engine.write.indexes import DerivedIndexes
from fusion import FusedHit
from sparse import FieldFilter, KeywordHit, KeywordSearchFacade, TermStatistics
from sparse.clamp import clamp_language, clamp_text

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchState:
    """Everything one corpus's searches need, as one immutable snapshot.

    A search reads the corpus's current state once and uses only that snapshot; a
    switch of embedder or config builds a new state and installs it in one assignment
    (``Searcher.install``), so a search in flight never sees half of a change.
    """

    corpus: str
    config: CorpusConfig
    store: DocumentStore
    indexes: DerivedIndexes
    embedder: Embedder | None
    keyword_full: KeywordSearchFacade
    keyword_index_backed: KeywordSearchFacade
    visibility: DenseVisibility
    metrics: EngineMetrics
    gate: contextlib.AbstractContextManager[None]


class Searcher:
    """Runs searches for one corpus.

    In a hybrid search the keyword arm runs on a worker thread while the query is
    embedded: the model call releases the GIL, so the keyword arm's cost hides behind the
    one model call that every hybrid search must pay anyway. The search waits for the
    query's vector at most ``query_embed_timeout`` seconds (``engine.search.embed_deadline``;
    ``None``: embedded in the calling thread, without a deadline).
    """

    def __init__(
        self,
        state: SearchState,
        query_embed_timeout: float | None = DEFAULT_QUERY_EMBED_TIMEOUT_S,
    ) -> None:
        self._state = state
        self._deadline = EmbedDeadline(state.corpus, query_embed_timeout)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._pool_pid = os.getpid()

    @property
    def state(self) -> SearchState:
        return self._state

    def install(self, state: SearchState) -> None:
        """Replace the snapshot later searches use (one reference assignment: atomic)."""
        self._state = state

    def _workers(self) -> ThreadPoolExecutor:
        if self._pool_pid != os.getpid():
            # A forked child: the pool's threads stayed behind (a job submitted to it
            # would wait for ever), and so may the holder of its lock: start afresh.
            self._pool, self._pool_lock, self._pool_pid = None, threading.Lock(), os.getpid()
        if self._pool is None:
            with self._pool_lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(
                        max_workers=8, thread_name_prefix=f"tandem-{self._state.corpus}"
                    )
        return self._pool

    def close(self) -> None:
        self._deadline.close()
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None

    def search(
        self,
        query: object,
        top_k: object,
        offset: object,
        language_id: object,
        filters: tuple[FieldFilter, ...] = (),
    ) -> list[Passage]:
        """``filters`` (already validated) apply inside both arms, before the top k."""
        p = self._state  # read once: a concurrent switch installs a new state
        started = time.perf_counter()
        text = clamp_text(query)
        if text is None:
            return []
        k = clamp_int(top_k, 1, MAX_TOP_K, 10)
        skip = page_start(offset)
        if skip is None:
            return []  # past MAX_OFFSET: an empty page, so paging stops
        language = clamp_language(language_id)
        if language is not None and language > MAX_LANGUAGE_ID:
            return []  # no document has such a language (and SQLite ints stop at 2**63)
        need = skip + k
        asks_within_deadline = p.embedder is not None and self._deadline.bounded
        if asks_within_deadline:
            # The embedder's is_available() is asked on the embedding's worker, within
            # the deadline (an Ollama health probe, or a custom check that hangs).
            strategy = Strategy.HYBRID
        else:
            strategy = resolve_strategy(p.corpus, p.embedder, p.metrics)
        if strategy is Strategy.KEYWORD and p.embedder is not None:
            p.metrics.fallbacks.labels(p.corpus, FallbackReason.EMBEDDER_DOWN.value).inc()
        rank: Ranking | None = None
        ranked: Ranked | None = None
        if strategy is Strategy.HYBRID and p.embedder is not None:
            try:
                rank = self._hybrid(p, p.embedder, text, need, language, filters)
                ranked = rank(frozenset())
                if asks_within_deadline:  # as resolve_strategy records it
                    up = reported_up(p.embedder, True)
                    p.metrics.embedder_up.labels(p.corpus).set(1 if up else 0)
            except EmbedderDown:
                p.metrics.fallbacks.labels(p.corpus, FallbackReason.EMBEDDER_DOWN.value).inc()
                p.metrics.embedder_up.labels(p.corpus).set(0)
                strategy = Strategy.KEYWORD
            except QueryEmbedTimeout:
                # Not a failure of the embedder's (it may answer yet): embedder_up stays.
                p.metrics.fallbacks.labels(p.corpus, FallbackReason.EMBEDDER_TIMEOUT.value).inc()
                strategy = Strategy.KEYWORD
            except EmbedderUnavailable:
                p.metrics.fallbacks.labels(p.corpus, FallbackReason.EMBEDDER_ERROR.value).inc()
                p.metrics.embedder_up.labels(p.corpus).set(0)  # as a failed add records it
                strategy = Strategy.KEYWORD
        # See engine.search.gate: the Python part, one search at a time. A keyword search
        # holds the gate from its index search to its passages, so two threads of one
        # process alternate whole searches instead of trading the interpreter every 5 ms
        # (p95 over the c/2 bound at 2 threads a process: 1.79 -> 1.11, README); the
        # database fallback's scans step out of it (GateFreeBackend).
        with p.gate:
            if rank is None or ranked is None:
                rank = self._keyword(p, text, need, language, filters, skip == 0)
                ranked = rank(frozenset())
            page = ranked.fused[skip:need]
            passages = build_passages(p, page, ranked.sparse_hits, text, language, filters)
            # A hit dropped from the page, or the index known to lag the store (a stale hit
            # anywhere in the arms would shift the page): rank again without the stale.
            if len(passages) < len(page) or p.indexes.keyword_pending:
                passages = refilled(p, rank, ranked, passages, skip, need, text, language, filters)
        p.metrics.searches.labels(p.corpus, strategy.value).inc()
        p.metrics.search_duration.labels(p.corpus).observe(time.perf_counter() - started)
        return passages

    # -- strategies -----------------------------------------------------------------------

    def browse(
        self, top_k: object, offset: object, language_id: object, filters: tuple[FieldFilter, ...]
    ) -> list[Passage]:
        """Public documents satisfying ``filters``, in insertion order (no query text)."""
        k = clamp_int(top_k, 1, MAX_TOP_K, 10)
        skip = page_start(offset)
        if skip is None:
            return []  # as in search: past MAX_OFFSET the page is empty
        language = clamp_language(language_id)
        if language is not None and language > MAX_LANGUAGE_ID:
            return []  # as in search: no document has such a language
        state = self._state
        ids = state.store.public_filtered_ids(filters, language, k, skip)
        page = [FusedHit(id=sid, score=0.0, ranks=(None, None)) for sid in ids]
        return build_passages(state, page, [], "", None, filters)

    # -- internal: for engine.cluster ------------------------------------------------------

    def keyword_window(
        self,
        text: str,
        limit: int,
        language: int | None,
        filters: tuple[FieldFilter, ...],
        index_backed: bool,
        need: int,
        statistics: TermStatistics | None = None,
    ) -> ArmWindow:
        """Internal (``engine.cluster``): the scored keyword window for a query the caller
        has clamped; see ``engine.search.windows.keyword_window``."""
        p = self._state
        return keyword_window(
            p,
            text,
            limit,
            language,
            filters,
            index_backed=index_backed,
            need=need,
            passages=self._builder(p, text, language, filters),
            statistics=statistics,
        )

    def term_statistics(self, text: str, language: int | None) -> TermStatistics | None:
        """Internal (``engine.cluster``): the keyword index's statistics for the terms of
        a clamped query (``sparse.TermStatistics``); ``None`` when it cannot say."""
        return self._state.keyword_index_backed.term_statistics(text, language)

    def vector_window(
        self,
        text: str,
        vector: npt.NDArray[np.float32],
        limit: int,
        language: int | None,
        filters: tuple[FieldFilter, ...],
        need: int,
        covered: Collection[str],
    ) -> ArmWindow:
        """Internal (``engine.cluster``): the scored vector window for a query embedded
        elsewhere; see ``engine.search.windows.vector_window``."""
        p = self._state
        return vector_window(
            p,
            vector,
            limit,
            language,
            filters,
            need=need,
            covered=covered,
            passages=self._builder(p, text, language, filters),
        )

    def _builder(
        self, p: SearchState, text: str, language: int | None, filters: tuple[FieldFilter, ...]
    ) -> Callable[[Sequence[FusedHit]], list[Passage]]:
        def build(page: Sequence[FusedHit]) -> list[Passage]:
            with p.gate:
                return build_passages(p, page, [], text, language, filters)

        return build

    def passages_for(
        self,
        ids: Sequence[str],
        text: str,
        language: int | None,
        filters: tuple[FieldFilter, ...],
    ) -> list[Passage]:
        """Internal (``engine.cluster``): passages for ``ids`` that the store confirms
        public (and eligible under ``filters``), in order; score and ranks are placeholders.
        ``language`` is the search's (excerpts anchor on its analyzer's terms)."""
        p = self._state
        page = [FusedHit(id=sid, score=0.0, ranks=(None, None)) for sid in ids]
        with p.gate:
            return build_passages(p, page, [], text, language, filters)

    def _keyword(
        self,
        p: SearchState,
        text: str,
        need: int,
        language: int | None,
        filters: tuple[FieldFilter, ...],
        first_page: bool,
    ) -> Ranking:
        def rank(exclude: frozenset[str]) -> Ranked:
            t0 = time.perf_counter()
            # On a first page the tantivy backend cuts the excerpts from the store's texts
            # with the term order it has at hand (``build_passages`` cutting them would
            # analyse the query a second time: ~0.2 ms of Cranfield's ~1.4 ms answer).
            # Deeper, it would read the text of every hit above the page too (offset 1,000
            # of megabyte texts: a gigabyte, for 200 passages): ``build_passages`` cuts
            # the page's alone.
            wanted = keyword_only_window(p.config, need) + len(exclude)
            hits = p.keyword_full.search(
                text,
                wanted,
                language,
                filters=filters,
                excerpts=first_page and wanted == need,
                distinct_urls=False,
            )
            p.metrics.arm_duration.labels(p.corpus, Arm.SPARSE.value).observe(
                time.perf_counter() - t0
            )
            kept = without(hits, exclude)
            return Ranked(fuse_arms(p.config, kept, None, need), kept)

        return rank

    def _hybrid(
        self,
        p: SearchState,
        embedder: Embedder,
        text: str,
        need: int,
        language: int | None,
        filters: tuple[FieldFilter, ...],
    ) -> Ranking:
        window = hybrid_window(p.config, need)
        sparse_arm: list[Future[list[KeywordHit]]] = []
        arm_lock = threading.Lock()
        search_over: list[bool] = []  # set once this search stops waiting for the embedder

        def start_sparse_arm() -> None:
            # Called by the embedder right before its model runs and releases the GIL:
            # submitted earlier, the worker's Python would hold up the tokeniser. (On the
            # embedding's worker: a call past its deadline starts no arm nobody waits for.)
            with arm_lock:
                if not search_over:
                    sparse_arm.append(
                        self._workers().submit(self._sparse_arm, p, text, window, language, filters)
                    )

        try:
            t0 = time.perf_counter()
            vector = self._deadline.embed(
                embedder, text, start_sparse_arm, check_available=self._deadline.bounded
            )
            t1 = time.perf_counter()
            p.metrics.embed_duration.labels(p.corpus, "query").observe(t1 - t0)
            index = p.indexes.faiss
            if index is not None and vector.shape[-1] != index.dimension:
                # The provider changed under us (a model switch in progress): this query
                # is answered from keywords rather than failing.
                raise EmbedderUnavailable("query vector dimension differs from the index")
            dense = self._dense_arm(p, vector, window, language, filters)
        finally:
            # Never leave the arm running behind a failed query.
            with arm_lock:
                search_over.append(True)
            done = [arm.result() for arm in sparse_arm]
        # (an embedder that never called the hook gets the arm run here)
        sparse_hits = done[0] if done else self._sparse_arm(p, text, window, language, filters)
        if not sparse_hits and p.store.has_public_documents():
            p.metrics.sparse_arm_empty.labels(p.corpus).inc()

        def rank(exclude: frozenset[str]) -> Ranked:
            kept = without(sparse_hits, exclude)
            kept_dense = without(dense, exclude)
            fused = self._fused(p, vector, text, window, need, language, filters, kept, kept_dense)
            if window > p.config.window:  # a page past the fusion window
                # Each arm runs again for the window's own ranking (and is timed again:
                # the arm metrics count arm runs, two per such search).
                small = p.config.window
                head = self._fused(
                    p,
                    vector,
                    text,
                    small,
                    small,
                    language,
                    filters,
                    without(self._sparse_arm(p, text, small, language, filters), exclude),
                    without(self._dense_arm(p, vector, small, language, filters), exclude),
                )
                fused = paged_ranking(head, fused, need)
            return Ranked(fused, kept, kept_dense)

        return rank

    @staticmethod
    def _dense_arm(
        p: SearchState,
        vector: npt.NDArray[np.float32],
        window: int,
        language: int | None,
        filters: tuple[FieldFilter, ...],
    ) -> list[tuple[str, float]]:
        started = time.perf_counter()
        index = p.indexes.faiss
        hits: list[tuple[str, float]] = []
        if index is not None and len(index) > 0:
            allow = p.visibility.allow_list(index, language, filters)
            hits = index.search(vector, window, allow=allow)
        p.metrics.arm_duration.labels(p.corpus, Arm.DENSE.value).observe(
            time.perf_counter() - started
        )
        return hits

    def _fused(
        self,
        p: SearchState,
        vector: npt.NDArray[np.float32],
        text: str,
        window: int,
        need: int,
        language: int | None,
        filters: tuple[FieldFilter, ...],
        sparse_hits: list[KeywordHit],
        dense: list[tuple[str, float]],
    ) -> list[FusedHit]:
        """The arms' windows fused, ``need`` deep — with completion on, each followed by
        its order of the other arm's extra candidates first (``engine.search.completion``;
        the extras passed their own arm's visibility checks, and the passages are checked
        against the store again regardless)."""
        if p.config.complete_windows:
            started = time.perf_counter()
            sparse_hits, dense = complete_windows(
                sparse_hits,
                dense,
                window,
                keyword_scores=lambda ids: keyword_scores(p, text, ids, language, filters),
                vector_scores=lambda ids: vector_scores(p, vector, ids),
            )
            p.metrics.arm_duration.labels(p.corpus, Arm.COMPLETION.value).observe(
                time.perf_counter() - started
            )
        return fuse_arms(p.config, sparse_hits, dense, need)

    def completion_windows(
        self,
        text: str,
        vector: npt.NDArray[np.float32],
        for_keyword: list[str],
        for_vector: list[str],
        language: int | None,
        filters: tuple[FieldFilter, ...],
        statistics: TermStatistics | None = None,
    ) -> tuple[ArmWindow, ArmWindow]:
        """Internal (``engine.cluster``): this corpus's part of completing a sharded
        search; see ``engine.search.windows.completion_windows``."""
        p = self._state
        return completion_windows(
            p, text, vector, for_keyword, for_vector, language, filters, statistics
        )

    def _sparse_arm(
        self,
        p: SearchState,
        text: str,
        window: int,
        language: int | None,
        filters: tuple[FieldFilter, ...],
    ) -> list[KeywordHit]:
        started = time.perf_counter()
        # Ranked ids are all fusion needs; excerpts are cut for the final page only.
        # (The tantivy backend enters the search gate itself; see CurrentIndexBackend.)
        hits = p.keyword_index_backed.search(
            text, window, language, filters=filters, excerpts=False, distinct_urls=False
        )
        p.metrics.arm_duration.labels(p.corpus, Arm.SPARSE.value).observe(
            time.perf_counter() - started
        )
        return hits
