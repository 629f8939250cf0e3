"""How one corpus merges its arms: ``CorpusConfig.fusion`` dispatched to ``fusion``.

- ``RRFFusion`` (the default): ``fusion.rrf`` over the two ranked id lists with the
  corpus's ``rrf_k`` and per-arm ``weights``.
- ``ZScoreFusion``: ``fusion.zscore_fusion`` over the two scored windows, the keyword arm
  weighted ``1 - dense_weight`` and the vector arm ``dense_weight``.

A keyword-only answer (vectors off, or the embedder down) goes through the same function
with no vector arm, so its scores are on the same scale as the corpus's hybrid answers
and its order is the keyword arm's own. Every result carries each arm's 1-based rank.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType

from engine.config import CorpusConfig, RRFFusion, ZScoreFusion
from fusion import FusedHit, rrf, zscore_fusion
from sparse import MAX_SOURCES, KeywordHit

DenseWindow = Sequence[tuple[str, float]]
"""The vector arm's window: ``(source id, cosine similarity)``, best first."""


def hybrid_window(config: CorpusConfig, need: int) -> int:
    """How many candidates each arm contributes to a hybrid search ``need`` places deep:
    the corpus's window, or — for pages past it — the most any page can reach. Not
    ``need`` itself: a window that grew with the page fused every page differently, and
    paging past the window repeated some documents and never showed others."""
    return config.window if need <= config.window else MAX_SOURCES


def keyword_only_window(config: CorpusConfig, need: int) -> int:
    """How many keyword hits a keyword-only answer ``need`` places deep is fused from:
    ``need`` under RRF (ranks alone need no more than the page), the hybrid window under
    a score fusion — z-scores standardise over a window, and standardised over the page
    asked for, a one-hit page scored 0 and the next page's scores rose above this one's."""
    return need if isinstance(config.fusion, RRFFusion) else hybrid_window(config, need)


def paged_ranking(head: Sequence[FusedHit], deep: Sequence[FusedHit], limit: int) -> list[FusedHit]:
    """The order pages past the fusion window are cut from: the window's own ranking
    (``head``, what every page within the window is cut from), then the deep ranking
    without those documents — one order for every page, so paging neither repeats nor
    skips a document."""
    seen = {hit.id for hit in head}
    return [*head, *(hit for hit in deep if hit.id not in seen)][:limit]


def fuse_arms(
    config: CorpusConfig,
    sparse: Sequence[KeywordHit],
    dense: DenseWindow | None,
    limit: int,
) -> list[FusedHit]:
    """The fused page of ``limit`` hits; ``dense=None`` for a keyword-only answer."""
    return _FUSERS[type(config.fusion)](config, sparse, dense, limit)


def _by_rrf(
    config: CorpusConfig, sparse: Sequence[KeywordHit], dense: DenseWindow | None, limit: int
) -> list[FusedHit]:
    sparse_ids = [hit.source_id for hit in sparse]
    if dense is None:
        return rrf(
            [sparse_ids], k=config.rrf_k, weights=(_alone(config.weights.sparse),), limit=limit
        )
    return rrf(
        [sparse_ids, [doc_id for doc_id, _ in dense]],
        k=config.rrf_k,
        weights=(config.weights.sparse, config.weights.dense),
        limit=limit,
    )


def _by_zscore(
    config: CorpusConfig, sparse: Sequence[KeywordHit], dense: DenseWindow | None, limit: int
) -> list[FusedHit]:
    spec = config.fusion
    assert isinstance(spec, ZScoreFusion)  # the dispatch table guarantees it
    keyword = _scored(sparse)
    if dense is None:
        return zscore_fusion([keyword], limit=limit)  # a convex combination: weight-free
    weights = (1.0 - spec.dense_weight, spec.dense_weight)
    return zscore_fusion([keyword, list(dense)], weights=weights, limit=limit)


def _alone(weight: float) -> float:
    """The keyword arm's weight when it answers alone: its hybrid weight (the scores stay
    on the hybrid answers' scale), or 1 when that is 0 — a corpus that gives keywords no
    say in fusion still answers from them when its embedder is down, in their order."""
    return weight if weight > 0 else 1.0


def _scored(hits: Sequence[KeywordHit]) -> list[tuple[str, float]]:
    """Keyword hits as ``(id, score)``. A backend without scores (the database fallback)
    gets its rank order as the score, so fusion still follows its order."""
    if all(hit.score is not None for hit in hits):
        return [(hit.source_id, float(hit.score or 0.0)) for hit in hits]
    return [(hit.source_id, -float(rank)) for rank, hit in enumerate(hits, start=1)]


_Fuser = Callable[[CorpusConfig, Sequence[KeywordHit], DenseWindow | None, int], list[FusedHit]]

_FUSERS: Mapping[type, _Fuser] = MappingProxyType({RRFFusion: _by_rrf, ZScoreFusion: _by_zscore})
