"""Reciprocal rank fusion (RRF) over ranked id lists.

Pure functions: no I/O, no logging, no third-party imports.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass

from fusion._args import as_float, checked_limit, checked_weights
from fusion.errors import FusionError

DEFAULT_K = 60.0
"""The RRF constant of Cormack, Clarke & Büttcher (2009)."""


@dataclass(frozen=True, slots=True)
class FusedHit:
    """One fused result.

    ``ranks[i]`` is the 1-based rank of ``id`` in input ranking ``i`` (after that ranking's
    duplicates are dropped), or ``None`` where the ranking does not contain it, so a caller
    can explain why a hit is where it is.
    """

    id: str
    score: float
    ranks: tuple[int | None, ...]


def rrf(
    rankings: Sequence[Sequence[str]],
    k: float = DEFAULT_K,
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> list[FusedHit]:
    """Fuse ranked id lists by reciprocal rank fusion.

    Convention (Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms Condorcet
    and individual Rank Learning Methods", SIGIR 2009)::

        score(d) = Σ_i  w_i / (k + rank_i(d))      rank 1-based, k = 60, w_i = 1 by default

    summed over the rankings that contain ``d``. Peers differ, so scores are not comparable
    across libraries: Qdrant defaults to k = 2, txtai to k = 0, Haystack adds 61 to a
    0-based rank (the same as k = 60 here, different from k = 61).

    Semantics:

    - A ranking lists ids best first. Within one ranking a repeated id keeps its first
      (best) occurrence; later repeats are dropped and the ids after them move up, as if
      the repeat had never been there.
    - An empty ranking contributes nothing. A single non-empty ranking (or several with
      the others empty) yields its own order, duplicates dropped.
    - The result holds the union of all ids, truncated to ``limit`` (``None`` = all).
    - Order is deterministic (``order_key``): score descending, then best (minimum) rank
      across the rankings ascending, then the ranks in argument order (the first ranking's
      rank first; absent counts as last), then id ascending. Exact ties are common: a
      document ranked (1, 2) and one ranked (2, 1) score the same; the ranking passed
      first decides between them, never an arbitrary id. Scores are summed with
      ``math.fsum`` (exactly rounded), so the order of the rankings never changes a score.
    - A weight of 0 keeps the ranking's ids in the union (with no score from it).

    Raises:
        FusionError: (a ``ValueError``) if ``k`` is not a finite number > 0; if ``weights``
            does not have one finite, non-negative number per ranking; if ``limit`` is not
            ``None`` or an integer >= 0; if ``rankings`` or one ranking is a bare ``str``;
            if finite weights and ``k`` make a fused score overflow the float range.
    """
    arms = _checked_rankings(rankings)
    constant = _checked_k(k)
    arm_weights = checked_weights(weights, len(arms))
    cap = checked_limit(limit)

    return finite_hits(
        lambda: _fused(arms, constant, arm_weights),
        "fused scores overflow the float range: use smaller weights or a larger k",
        cap,
    )


def finite_hits(
    fuse: Callable[[], list[FusedHit]], overflow: str, limit: int | None
) -> list[FusedHit]:
    """``fuse()``'s hits, the first ``limit`` of them; ``FusionError(overflow)`` when finite
    arguments took a score out of float's range — ``fsum`` raising (past the range, or
    inf - inf) or a plain sum or product becoming inf without a word."""
    try:
        hits = fuse()
    except (OverflowError, ValueError) as exc:
        raise FusionError(overflow) from exc
    if not all(math.isfinite(hit.score) for hit in hits):
        raise FusionError(overflow)
    if limit is not None:
        del hits[limit:]
    return hits


def _fused(
    arms: Sequence[Sequence[str]], constant: float, arm_weights: list[float]
) -> list[FusedHit]:
    if len(arms) == 1:
        # One ranking (a keyword-only answer): its scores fall with the rank (all 0 at
        # weight 0, where the tie-break is the rank), so its own order is the fused one.
        weight = arm_weights[0]
        ranked = enumerate(dict.fromkeys(arms[0]), start=1)
        hits = [FusedHit(doc_id, weight / (constant + rank), (rank,)) for rank, doc_id in ranked]
    else:
        entries = _fuse(arms, constant, arm_weights)
        hits = [FusedHit(doc_id, score, tuple(ranks)) for doc_id, score, ranks in entries]
        sort_hits(hits)
    return hits


_ABSENT = sys.maxsize
"""Sorts after every real rank."""


def sort_hits(hits: list[FusedHit]) -> None:
    """Sort in place into the ``order_key`` order: by score first (cheap, stable), then
    each run of equal scores by the full key."""
    hits.sort(key=_negated_score)
    start = 0
    while start < len(hits):
        end = start + 1
        while end < len(hits) and hits[end].score == hits[start].score:
            end += 1
        if end - start > 1:
            hits[start:end] = sorted(hits[start:end], key=order_key)
        start = end


def _negated_score(hit: FusedHit) -> float:
    return -hit.score


def order_key(hit: FusedHit) -> tuple[float, int, tuple[int, ...], str]:
    """The documented result order: score descending, best rank, ranks in argument
    order (absent last), id. Ids are unique in a result, so the key is total."""
    ranks = tuple(_ABSENT if rank is None else rank for rank in hit.ranks)
    return (-hit.score, min(ranks, default=_ABSENT), ranks, hit.id)


_Entry = tuple[str, float, list[int | None]]
"""(id, score, ranks)."""


def _fuse(arms: Sequence[Sequence[str]], k: float, weights: Sequence[float]) -> list[_Entry]:
    """Score every id; a repeated id in one arm keeps its first rank, later ids move up."""
    width = len(arms)
    ranks_by_id: dict[str, list[int | None]] = {}
    score_by_id: dict[str, float] = {}
    for arm, ranking in enumerate(arms):
        weight = weights[arm]
        # dict.fromkeys keeps each id's first occurrence, in order: the dedup rule.
        for rank, doc_id in enumerate(dict.fromkeys(ranking), start=1):
            ranks = ranks_by_id.get(doc_id)
            if ranks is None:
                ranks_by_id[doc_id] = ranks = [None] * width
                score_by_id[doc_id] = weight / (k + rank)
            else:
                score_by_id[doc_id] += weight / (k + rank)
            ranks[arm] = rank
    entries: list[_Entry] = []
    for doc_id, ranks in ranks_by_id.items():
        score = score_by_id[doc_id]
        if width > 2 and width - ranks.count(None) > 2:
            # Two floats add commutatively; three or more may round differently per order.
            # fsum is exactly rounded, so the order of the arms never changes a score.
            score = math.fsum(
                weights[arm] / (k + rank) for arm, rank in enumerate(ranks) if rank is not None
            )
        entries.append((doc_id, score, ranks))
    return entries


def _checked_rankings(rankings: Sequence[Sequence[str]]) -> Sequence[Sequence[str]]:
    if isinstance(rankings, str):
        raise FusionError("rankings must be a sequence of rankings, not a str")
    if not isinstance(rankings, Iterable):
        raise FusionError("rankings must be a sequence of rankings (sequences of ids)")
    rankings = list(rankings)  # a generator of rankings is read once, here
    for index, ranking in enumerate(rankings):
        if isinstance(ranking, str):
            raise FusionError(
                f"rankings[{index}] is a str; a ranking is a sequence of ids, best first"
            )
        if isinstance(ranking, Set | Mapping) or not isinstance(ranking, Iterable):
            # A set has no order to rank by (it fused in hash order); a mapping ranks keys.
            raise FusionError(
                f"rankings[{index}] is a {type(ranking).__name__}; a ranking is a sequence "
                "of ids, best first"
            )
    return rankings


def _checked_k(k: float) -> float:
    value = as_float("k", k)
    if not (math.isfinite(value) and value > 0):
        raise FusionError(f"k must be a finite number > 0, got {k!r}")
    return value
