"""One sharded search: clamp, embed once, fan out, merge each arm, fuse once, page.

The inputs are clamped exactly as ``Corpus.search`` clamps them. The query is embedded
here, once; every shard that is up returns its keyword window and its vector window
*with scores* (``Corpus._arm_windows``); each arm is merged across shards by score
(``engine.cluster.merge``) and the two global rankings are fused by one ``fusion.rrf``.
With completion on, the vector call also carries each shard's part of completing both
arms (``engine.search.completion.shard_extras``), so completion costs no round trip.
A passage's ranks are its global ranks. Shards also send passages for their own best
candidates, so the page usually needs no second round trip; the rest are fetched from
their owners.

Global term statistics (``ClusterOptions.global_term_statistics``, off by default, as
Elasticsearch's ``dfs_query_then_fetch`` is): before the keyword windows, every shard
reports its document count and the document frequency of each query term
(``sparse.TermStatistics``); the coordinator sums them and every shard scores the keyword
arm with the sums, so a shard's BM25 scores are the ones one index holding every document
would give (up to length normalisation, which stays per shard). It costs one more round
to the shards; in a hybrid search both rounds run on a coordinator thread while the query
is embedded here.

Embedder trouble never fails a search, as on one node: while the coordinator's embedder
is down, or its query vector is unusable (``engine.dimension_guard``: NaN, infinite, all
zero, not one row), the search answers from keywords; and if every shard's keyword window
arrived but every vector round failed, the answer is fused from those keyword windows
alone. Each such search counts in ``tandem_search_fallbacks{corpus,reason}``, with the
reasons one corpus uses (``embedder_down``, ``embedder_error``).

Time: one search waits ``ClusterOptions.search_timeout_s`` for its shards in all, not per
round (``_Budget``), and a shard that missed a round is not asked again in that search:
the later rounds go to the shards that answered.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from dense import Embedder, EmbedderUnavailable
from engine.cluster.calls import Pending, ShardCalls
from engine.cluster.health import ClusterMetrics, ShardHealth
from engine.cluster.merge import completed, fuse, merge_arm
from engine.cluster.routing import group_by_shard
from engine.config import CorpusConfig
from engine.documents import ArmRanks, Passage
from engine.limits import MAX_LANGUAGE_ID, MAX_TOP_K, clamp_int, page_start
from engine.search.embed_deadline import EmbedDeadline, EmbedderDown, QueryEmbedTimeout
from engine.search.fusing import hybrid_window, keyword_only_window, paged_ranking
from engine.search.strategy import FallbackReason
from engine.search.windows import ArmWindow, ScoredHit
from fusion import FusedHit
from sparse import FieldFilter, TermStatistics
from sparse.clamp import clamp_language, clamp_text

# A round is given at least this share of the search timeout, even when the budget is
# spent: a shard that hung in the first round used it up, and the shards that answered
# still need a moment to answer the next one.
_ROUND_FLOOR = 0.1


class _Budget:
    """One search's time for its shards: the search timeout from the search's start,
    shared by every round (a shard that hangs costs it once, not once per round), plus
    the time the coordinator spends embedding the query (its own work: no shard is being
    waited for). A round is given what is left, and never less than ``_ROUND_FLOOR`` of
    the timeout, so a search waits for its shards at most the timeout plus that share
    per later round."""

    def __init__(self, timeout_s: float, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._floor = timeout_s * _ROUND_FLOOR
        self._deadline = clock() + timeout_s

    def extend(self, seconds: float) -> None:
        self._deadline += seconds

    def left(self) -> float:
        """The timeout for the next round."""
        return max(self._floor, self._deadline - self._clock())


@dataclasses.dataclass(frozen=True, slots=True)
class _KeywordRequest:
    """One search's keyword windows, as every shard is asked for them."""

    targets: list[int]
    text: str
    window: int
    language: int | None
    filters: tuple[FieldFilter, ...]
    index_backed: bool
    ahead: int


class ShardedSearcher:
    """Runs searches over a sharded corpus's shards (see the module docstring).
    ``embedder`` comes guarded (``DimensionGuard``): its refusals are what make a search
    with an unusable query vector answer from keywords."""

    def __init__(
        self,
        config: CorpusConfig,
        shards: int,
        embedder: Embedder | None,
        calls: ShardCalls,
        health: ShardHealth,
        metrics: ClusterMetrics,
        *,
        timeout_s: float,
        global_statistics: bool = False,
        query_embed_timeout_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._deadline = EmbedDeadline(config.name, query_embed_timeout_s)
        self._shards = shards
        self._embedder = embedder
        self._calls = calls
        self._health = health
        self._metrics = metrics
        self._timeout_s = timeout_s
        self._clock = clock
        self._global_statistics = global_statistics
        # With global statistics, a hybrid search's two keyword rounds run here beside the
        # query embedding (threads start on demand, one per concurrent search, up to 32).
        self._rounds = (
            ThreadPoolExecutor(max_workers=32, thread_name_prefix="tandem-keyword")
            if global_statistics
            else None
        )

    def close(self) -> None:
        """Stop the keyword-round threads (searches still running finish first) and the
        idle query-embedding workers."""
        if self._rounds is not None:
            self._rounds.shutdown(wait=False)
        self._deadline.close()

    def search(
        self,
        query: object,
        top_k: object,
        offset: object,
        language_id: object,
        compiled: tuple[FieldFilter, ...],
    ) -> list[Passage]:
        """``compiled``: the filter, already validated against the corpus's fields."""
        started = time.perf_counter()
        budget = _Budget(self._timeout_s, self._clock)
        text = clamp_text(query)
        if text is None:
            return []
        k = clamp_int(top_k, 1, MAX_TOP_K, 10)
        skip = page_start(offset)
        if skip is None:
            return []  # past MAX_OFFSET: an empty page, as on one node
        language = clamp_language(language_id)
        if language is not None and language > MAX_LANGUAGE_ID:
            return []
        need = skip + k
        config = self._config
        targets = self._health.up()
        ahead = passages_ahead(need, len(targets))
        embedder = self._embedder
        vector = None
        # With a deadline, the embedder's is_available() is asked within it (on the
        # embedding's worker, ``_query_vector``), not here, where a probe could hang.
        if embedder is not None and not self._deadline.bounded and not embedder.is_available():
            self._fell_back(FallbackReason.EMBEDDER_DOWN)
        elif embedder is not None:
            # Hybrid: the keyword windows need no vector, so the shards compute them (and
            # before them the term statistics) while the query is embedded here, once.
            window = hybrid_window(config, need)
            request = _KeywordRequest(targets, text, window, language, compiled, True, ahead)
            collect: Callable[[], tuple[dict[int, ArmWindow], TermStatistics | None]]
            if self._rounds is not None and self._statistics_round(targets):
                collect = self._rounds.submit(self._keyword_round, request, budget).result
            else:
                pending = self._submit_keyword(request, None)
                collect = lambda: (self._calls.collect(pending, budget.left()), None)  # noqa: E731
            embedding = self._clock()
            vector = self._query_vector(embedder, text)
            budget.extend(self._clock() - embedding)
            keyword, statistics = collect()  # (not used if the model failed)
            targets = sorted(keyword)  # the shards that missed a round are not asked again
        if vector is None:
            window = keyword_only_window(config, need)
            keyword, statistics = self._keyword_round(
                _KeywordRequest(targets, text, window, language, compiled, False, ahead), budget
            )
        fused, windows, answered, vector = self._fused(
            text, vector, window, need, language, compiled, ahead, keyword, statistics, budget
        )
        if vector is not None and window > config.window:  # a page past the fusion window
            small = config.window
            head_keyword, head_statistics = self._keyword_round(
                _KeywordRequest(answered, text, small, language, compiled, True, ahead), budget
            )
            head, head_windows, answered, _ = self._fused(
                text,
                vector,
                small,
                small,
                language,
                compiled,
                ahead,
                head_keyword,
                head_statistics,
                budget,
            )
            fused = paged_ranking(head, fused, need)
            windows += head_windows
        if len(answered) < self._shards:
            self._metrics.partial_searches.labels(config.name).inc()
        passages = self._page(fused[skip:need], windows, answered, text, language, compiled, budget)
        self._metrics.search_duration.labels(config.name).observe(time.perf_counter() - started)
        return passages

    def _fused(
        self,
        text: str,
        vector: npt.NDArray[np.float32] | None,
        window: int,
        need: int,
        language: int | None,
        compiled: tuple[FieldFilter, ...],
        ahead: int,
        keyword: dict[int, ArmWindow],
        statistics: TermStatistics | None,
        budget: _Budget,
    ) -> tuple[list[FusedHit], list[ArmWindow], list[int], npt.NDArray[np.float32] | None]:
        """The global arms from the shards' keyword windows and (with ``vector``) one
        vector round, completed when the corpus says so, fused ``need`` deep; with the
        windows the shards sent, the shards that answered every round, and the vector
        (``None`` when every shard failed the vector round: then the answer is fused
        from the keyword windows alone, as a keyword search, and later rounds of the
        search need no vector either)."""
        config = self._config
        ranked = sorted(keyword)
        sparse = _keyword_ranking(keyword, ranked, window)
        rounds: dict[int, tuple[ArmWindow, ArmWindow, ArmWindow]] = {}
        if vector is not None:
            # The global keyword window is known now, so with completion on each shard
            # scores its part of both arms' extra candidates in the vector round itself
            # (``shard_extras``: it is told which of its documents made that window)
            # instead of in one more round trip after the merge.
            in_window = {h.id for h in sparse} if config.complete_windows else None

            def held(i: int) -> list[str] | None:
                return None if in_window is None else [x for x in keyword[i].ids if x in in_window]

            rounds = self._calls.fan_out(
                ranked,
                "vector_round",
                lambda i: (
                    text,
                    vector,
                    window,
                    language,
                    compiled,
                    ahead,
                    keyword[i].checked,
                    held(i),
                    statistics,
                ),
                budget.left(),
            )
            up = set(self._health.up()) if ranked and not rounds else set()
            refused = [i for i in ranked if i in up]
            if refused:
                # The shards answered the vector round by refusing the query vector: answer
                # as one corpus answers when its query vector fails, from a keyword search
                # — through the full cascade, as the windows above were the hybrid arm's,
                # index-backed only — asking only shards that answered.
                self._fell_back(FallbackReason.EMBEDDER_ERROR)
                alone = keyword_only_window(config, need)
                keyword, statistics = self._keyword_round(
                    _KeywordRequest(refused, text, alone, language, compiled, False, ahead),
                    budget,
                )
                return self._fused(
                    text, None, alone, need, language, compiled, ahead, keyword, statistics, budget
                )
            if ranked and not rounds:
                # Every shard missed the round (marked down, not asked again in this
                # search), the embedder did nothing wrong: the keyword windows already
                # here answer, without a vector arm (before, the search asked the missing
                # shards again, counted an embedder error and returned nothing).
                vector = None
        answered = [i for i in ranked if vector is None or i in rounds]
        if len(answered) < len(ranked):
            # A shard failed the vector round: the keyword window is cut again without it
            # (documents moving up into it stay unranked by the vector arm; the answer is
            # partial either way).
            sparse = _keyword_ranking(keyword, answered, window)
        vectors = [rounds[i][0] for i in answered if i in rounds]
        dense = None
        if vector is not None:
            dense = merge_arm([w.hits() for w in vectors], window)
            if config.complete_windows:
                sparse, dense = completed(sparse, dense, window, [rounds[i] for i in answered])
        fused = fuse(config, sparse, dense, need)
        windows = [keyword[i] for i in answered] + vectors
        return fused, windows, answered, vector

    def _keyword_round(
        self, request: _KeywordRequest, budget: _Budget
    ) -> tuple[dict[int, ArmWindow], TermStatistics | None]:
        """Every shard's keyword window, scored with the term statistics summed over the
        shards when they are on (one round for those first: the shards that did not
        report are not asked for windows), and the statistics used."""
        statistics = None
        if self._statistics_round(request.targets):
            reported = self._calls.fan_out(
                request.targets,
                "term_statistics",
                lambda _: (request.text, request.language),
                budget.left(),
            )
            parts = [s for s in reported.values() if s is not None]
            statistics = TermStatistics.combine(parts) if parts else None
            request = dataclasses.replace(request, targets=sorted(reported))
        pending = self._submit_keyword(request, statistics)
        windows: dict[int, ArmWindow] = self._calls.collect(pending, budget.left())
        return windows, statistics

    def _statistics_round(self, targets: Sequence[int]) -> bool:
        """Global statistics are on and there is more than one shard to sum over."""
        return self._global_statistics and len(targets) > 1

    def _submit_keyword(
        self, request: _KeywordRequest, statistics: TermStatistics | None
    ) -> Pending:
        r = request
        return self._calls.submit(
            r.targets,
            "keyword_window",
            lambda _: (
                r.text,
                r.window,
                r.language,
                r.filters,
                r.index_backed,
                r.ahead,
                statistics,
            ),
        )

    def _query_vector(self, embedder: Embedder, text: str) -> npt.NDArray[np.float32] | None:
        """The query's vector, embedded once here; ``None``: answer from keywords (it
        missed ``query_embed_timeout_s``, the provider failed, or the coordinator's
        ``DimensionGuard`` refused its vector: not one row, NaN, infinite, zero, another
        length)."""
        try:
            return self._deadline.embed(
                embedder, text, None, check_available=self._deadline.bounded
            )
        except EmbedderDown:
            self._fell_back(FallbackReason.EMBEDDER_DOWN)
            return None
        except QueryEmbedTimeout:
            self._fell_back(FallbackReason.EMBEDDER_TIMEOUT)
            return None
        except EmbedderUnavailable:  # InvalidOutput (the guard's) is one
            self._fell_back(FallbackReason.EMBEDDER_ERROR)
            return None

    def _fell_back(self, reason: FallbackReason) -> None:
        """A search of this hybrid corpus answered from keywords (metrics only)."""
        self._metrics.fallbacks.labels(self._config.name, reason.value).inc()

    def _page(
        self,
        page: Sequence[FusedHit],
        windows: Sequence[ArmWindow],
        answered: Sequence[int],
        text: str,
        language: int | None,
        filters: tuple[FieldFilter, ...],
        budget: _Budget,
    ) -> list[Passage]:
        """Passages for the fused page: the shards sent most of them with their windows;
        the rest come from their owners in one more round trip."""
        ready = {p.source_id: p for w in windows for p in w.passages}
        checked = {sid for w in windows for sid in w.checked}
        missing = [f.id for f in page if f.id not in checked]
        if missing:
            owners = group_by_shard(missing, self._shards)
            extra = self._calls.fan_out(
                [i for i in owners if i in answered],
                "passages",
                lambda i: ([missing[p] for p in owners[i]], text, language, filters),
                budget.left(),
            )
            ready.update({p.source_id: p for found in extra.values() for p in found})
        out: list[Passage] = []
        for hit in page:
            passage = ready.get(hit.id)
            if passage is None:  # not public, deleted meanwhile, or its shard went away
                continue
            ranks = ArmRanks(
                sparse=hit.ranks[0], dense=hit.ranks[1] if len(hit.ranks) > 1 else None
            )
            out.append(dataclasses.replace(passage, score=hit.score, ranks=ranks))
        return out


def _keyword_ranking(
    windows: dict[int, ArmWindow], shards: Sequence[int], window: int
) -> list[ScoredHit]:
    """The global keyword ranking from the windows of ``shards``: merged by score, cut at
    ``window`` (every document its own hit, as in one corpus, whatever its URL)."""
    return merge_arm([windows[i].hits() for i in shards], window)


def passages_ahead(need: int, shards: int) -> int:
    """How many of its best candidates per arm a shard sends passages for, unasked.

    A page of ``need`` hits spread over ``shards`` shards holds about ``need / shards``
    of each shard's; twice that, plus one, covers nearly every page (a shard holding more
    is asked again for the rest) while each shard cuts a fraction of the excerpts that
    ``need`` per shard would cost. One shard sends them all.
    """
    if shards <= 1:
        return need
    return min(need, math.ceil(2 * need / shards) + 1)
