"""Merging shards' arm windows into global rankings, then one fusion (pure functions).

Each shard returns its keyword window and its vector window, best first, with scores.
Each arm is merged across shards by score — the global ranking a single corpus holding
every document would have produced, up to per-shard BM25 statistics (see
``ClusterOptions.global_term_statistics``) — and only then are the two global rankings
fused, once, with the corpus's fusion (``fusion.rrf`` unless the config says otherwise).
Never an RRF of per-shard RRFs: a shard's rank 1 is not the corpus's rank 1.

Ties: equal scores are ordered by source id, as each arm orders them on one node (and
each shard's own list already is), so the merge ranks them as one index holding every
document would. Hits without a comparable score (the database fallback answering a
keyword search) come after every scored hit, interleaved shard by shard in their own
order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

from engine.config import CorpusConfig
from engine.search.completion import extra_candidates
from engine.search.fusing import fuse_arms
from engine.search.windows import ArmWindow, ScoredHit
from fusion import FusedHit
from sparse import KeywordHit

_Key = tuple[int, float, str, int]


def _keyed(shard: int, hits: Sequence[ScoredHit]) -> Iterator[tuple[_Key, ScoredHit]]:
    for rank, hit in enumerate(hits):
        if hit.score is None:
            yield (1, float(rank), "", shard), hit
        else:
            yield (0, -hit.score, hit.id, shard), hit


def merge_arm(per_shard: Sequence[Sequence[ScoredHit]], limit: int) -> list[ScoredHit]:
    """The global ranking of one arm: every shard's hits by score, best first (equal
    scores by id), cut at ``limit``. Each shard's list must already be in that order (as
    every arm returns it)."""
    merged = heapq.merge(*(_keyed(i, hits) for i, hits in enumerate(per_shard)))
    out: list[ScoredHit] = []
    seen: set[str] = set()
    for _, hit in merged:
        if len(out) >= limit:
            break
        if hit.id in seen:  # an id lives on one shard; guard against a double answer anyway
            continue
        seen.add(hit.id)
        out.append(hit)
    return out


def completed(
    sparse: list[ScoredHit],
    dense: list[ScoredHit],
    window: int,
    shard_answers: Sequence[tuple[ArmWindow, ArmWindow, ArmWindow]],
) -> tuple[list[ScoredHit], list[ScoredHit]]:
    """Both global rankings completed (``engine.search.completion``) from what the
    shards sent with their vector windows: per shard ``(vector window, keyword hits
    among its vector candidates outside the keyword window, vector scores of its
    keyword-window documents outside its vector window)`` (``shard_extras``). Each arm is
    followed by its order of the other arm's extra candidates, merged across shards by
    score; an extra whose shard did not answer stays unranked."""
    for_keyword, for_vector = extra_candidates(
        [h.id for h in sparse], [h.id for h in dense], window
    )
    keyword_wanted, vector_wanted = set(for_keyword), set(for_vector)
    keyword_extra = merge_arm(
        [[h for h in keyword.hits() if h.id in keyword_wanted] for _, keyword, _ in shard_answers],
        len(for_keyword),
    )
    # A shard's document outside the global vector window may still be inside its own
    # window (cut by the merge): its score came with the window, not with the extras.
    vector_extra = merge_arm(
        [
            sorted(
                (h for h in (*own.hits(), *scored.hits()) if h.id in vector_wanted),
                key=lambda h: (-(h.score or 0.0), h.id),
            )
            for own, _, scored in shard_answers
        ],
        len(for_vector),
    )
    return sparse + keyword_extra, dense + vector_extra


def fuse(
    config: CorpusConfig,
    sparse: Sequence[ScoredHit],
    dense: Sequence[ScoredHit] | None,
    limit: int,
) -> list[FusedHit]:
    """The corpus's own fusion (``engine.search.fusing``: RRF by default) over the two
    global rankings, once. ``dense=None`` is a keyword search: the keyword ranking alone,
    as a single corpus ranks it."""
    keyword = [KeywordHit(h.id, "", h.url, "", score=h.score) for h in sparse]
    vector = None if dense is None else [(h.id, h.score or 0.0) for h in dense]
    return fuse_arms(config, keyword, vector, limit)
