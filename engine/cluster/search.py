"""One sharded search: clamp, embed once, fan out, merge each arm, fuse once, page.

The inputs are clamped exactly as ``Corpus.search`` clamps them. The query is embedded
here, once; every shard that is up returns its keyword window and its vector window
*with scores* (``Corpus._arm_windows``); each arm is merged across shards by score
(``engine.cluster.merge``) and the two global rankings are fused by one ``fusion.rrf``.
A passage's ranks are its global ranks. Shards also send passages for their own best
candidates, so the page usually needs no second round trip; the rest are fetched from
their owners.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from dense import Embedder, EmbedderUnavailable, embed_query
from engine.cluster.calls import ShardCalls
from engine.cluster.health import ClusterMetrics, ShardHealth
from engine.cluster.merge import dedupe_urls, fuse, merge_arm
from engine.cluster.routing import group_by_shard
from engine.config import CorpusConfig
from engine.documents import ArmRanks, Passage
from engine.limits import MAX_LANGUAGE_ID, MAX_OFFSET, MAX_TOP_K
from engine.search.searcher import clamp_int
from engine.search.windows import ArmWindows
from fusion import FusedHit
from sparse import MAX_SOURCES, FieldFilter
from sparse.clamp import clamp_language, clamp_text


class ShardedSearcher:
    """Runs searches over a sharded corpus's shards (see the module docstring)."""

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
    ) -> None:
        self._config = config
        self._shards = shards
        self._embedder = embedder
        self._calls = calls
        self._health = health
        self._metrics = metrics
        self._timeout_s = timeout_s

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
        text = clamp_text(query)
        if text is None:
            return []
        k = clamp_int(top_k, 1, MAX_TOP_K, 10)
        skip = clamp_int(offset, 0, MAX_OFFSET, 0)
        language = clamp_language(language_id)
        if language is not None and language > MAX_LANGUAGE_ID:
            return []
        need = skip + k
        config = self._config
        vector = self._query_vector(text)
        window = min(max(config.window, need), MAX_SOURCES) if vector is not None else need
        answers: dict[int, ArmWindows] = self._calls.fan_out(
            self._health.up(),
            "windows",
            lambda _: (text, vector, need, window, language, compiled),
            self._timeout_s,
        )
        if len(answers) < self._shards:
            self._metrics.partial_searches.labels(config.name).inc()
        ordered = [answers[i] for i in sorted(answers)]
        sparse = merge_arm([a.sparse for a in ordered], sum(len(a.sparse) for a in ordered))
        sparse = dedupe_urls(sparse, window)
        dense = None if vector is None else merge_arm([a.dense for a in ordered], window)
        weights = (config.weights.sparse, config.weights.dense)
        fused = fuse(sparse, dense, k=config.rrf_k, weights=weights, limit=need)
        passages = self._page(fused[skip:need], answers, text, compiled)
        self._metrics.search_duration.labels(config.name).observe(time.perf_counter() - started)
        return passages

    def _query_vector(self, text: str) -> npt.NDArray[np.float32] | None:
        """The query's vector, embedded once here; ``None``: answer from keywords."""
        embedder = self._embedder
        if embedder is None or not embedder.is_available():
            return None
        try:
            return embed_query(embedder, text)
        except EmbedderUnavailable:
            return None

    def _page(
        self,
        page: Sequence[FusedHit],
        answers: Mapping[int, ArmWindows],
        text: str,
        filters: tuple[FieldFilter, ...],
    ) -> list[Passage]:
        """Passages for the fused page: the shards sent most of them with their windows;
        the rest come from their owners in one more round trip."""
        ready = {p.source_id: p for a in answers.values() for p in a.passages}
        checked = {sid for a in answers.values() for sid in a.checked}
        missing = [f.id for f in page if f.id not in checked]
        if missing:
            owners = group_by_shard(missing, self._shards)
            extra = self._calls.fan_out(
                [i for i in owners if i in answers],
                "passages",
                lambda i: ([missing[p] for p in owners[i]], text, filters),
                self._timeout_s,
            )
            ready.update({p.source_id: p for found in extra.values() for p in found})
        out: list[Passage] = []
        for hit in page:
            passage = ready.get(hit.id)
            if passage is None:  # not public, deleted meanwhile, or its shard went away
                continue
            ranks = ArmRanks(sparse=hit.ranks[0], dense=hit.ranks[1])
            out.append(dataclasses.replace(passage, score=hit.score, ranks=ranks))
        return out
