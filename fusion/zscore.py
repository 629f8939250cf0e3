"""Score fusion: a convex combination of z-scored arm scores.

Pure functions: no I/O, no logging, no third-party imports.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

from fusion._args import checked_limit, checked_weights
from fusion.errors import FusionError
from fusion.rrf import FusedHit, finite_hits, sort_hits

ScoredRanking = Sequence[tuple[str, float]]
"""One arm's candidate window: ``(id, score)`` pairs, best first (higher score = better)."""


def zscore_fusion(
    scored_rankings: Sequence[ScoredRanking],
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> list[FusedHit]:
    """Fuse scored candidate windows by a convex combination of per-arm z-scores.

    Convention (score normalisation as in Montague & Aslam, "Relevance score
    normalization for metasearch", CIKM 2001; weighted combination as in Fox & Shaw's
    CombSUM)::

        z_i(d)   = (s_i(d) - mean_i) / std_i        mean, population std over arm i's window
        score(d) = Σ_i  w_i · z_i(d)  /  Σ_i w_i    w_i = 1 by default (convex combination)

    A document missing from arm ``i``'s window takes that window's lowest z-score: the arm
    saw it score no better than its last candidate. Raw scores are never compared across
    arms (BM25 and cosine live on different scales); only their standardised forms are.
    Unlike ``rrf``, the gap between scores counts, not just the order: an arm that is
    sure of its first hit (a wide margin) moves it further than one that is not.

    Semantics:

    - A ranking lists ``(id, score)`` best first. Within one ranking a repeated id keeps
      its first occurrence (score and rank); later repeats are dropped and the ids after
      them move up, as in ``rrf``. ``FusedHit.ranks[i]`` is the 1-based position of the id
      in ranking ``i`` after that, or ``None`` where ranking ``i`` does not contain it.
    - An empty ranking contributes nothing. A ranking whose scores are all equal (or that
      holds one candidate) has no spread: every z-score of that arm is 0, so it adds no
      preference. A single non-empty ranking whose scores do not increase along it yields
      its own order.
    - The result holds the union of all ids, truncated to ``limit`` (``None`` = all).
    - Order is deterministic, as in ``rrf`` (``fusion.rrf.order_key``): fused score
      descending, then best (minimum) rank, then the ranks in argument order, then id.
      Means, variances and sums use ``math.fsum`` (exactly rounded), so the order of the
      rankings never changes a score.
    - A weight of 0 keeps the ranking's ids in the union (with no score from it); when
      every non-empty ranking weighs 0, every fused score is 0 and the order is the
      tie-break's.

    Raises:
        FusionError: (a ``ValueError``) if a score is not a finite real number; if an entry
            is not an ``(id, score)`` pair with a ``str`` id; if ``weights`` does not have
            one finite, non-negative number per ranking; if ``limit`` is not ``None`` or
            an integer >= 0; if finite scores or weights make a sum overflow the float range.
    """
    arms = [_checked_arm(index, ranking) for index, ranking in _enumerate_arms(scored_rankings)]
    arm_weights = checked_weights(weights, len(arms))
    cap = checked_limit(limit)
    return finite_hits(
        lambda: _fused(arms, arm_weights),
        "scores or weights so large that their sums overflow the float range",
        cap,
    )


def _fused(arms: list[dict[str, float]], arm_weights: list[float]) -> list[FusedHit]:
    live = [index for index, arm in enumerate(arms) if arm and arm_weights[index] > 0.0]
    total_weight = math.fsum(arm_weights[index] for index in live)

    width = len(arms)
    ranks_by_id: dict[str, list[int | None]] = {}
    z_by_arm: list[dict[str, float]] = []
    floor_by_arm: list[float] = []
    for arm_index, arm in enumerate(arms):
        z_scores, floor = _standardised(arm)
        z_by_arm.append(z_scores)
        floor_by_arm.append(floor)
        for rank, doc_id in enumerate(z_scores, start=1):
            ranks = ranks_by_id.get(doc_id)
            if ranks is None:
                ranks_by_id[doc_id] = ranks = [None] * width
            ranks[arm_index] = rank

    hits: list[FusedHit] = []
    for doc_id, ranks in ranks_by_id.items():
        terms = [
            arm_weights[index] * z_by_arm[index].get(doc_id, floor_by_arm[index]) for index in live
        ]
        score = math.fsum(terms) / total_weight if live else 0.0
        hits.append(FusedHit(doc_id, score, tuple(ranks)))
    sort_hits(hits)
    return hits


def _standardised(arm: dict[str, float]) -> tuple[dict[str, float], float]:
    """Each id's z-score within the arm (insertion order kept), and the arm's lowest."""
    if not arm:
        return {}, 0.0
    scores = list(arm.values())
    n = len(scores)
    mean = math.fsum(scores) / n
    # Deviations are scaled by the largest before squaring: squared tiny deviations
    # (1e-274) underflow to 0 and squared huge ones overflow, though their std exists.
    scale = max(abs(s - mean) for s in scores)
    if not (scale > 0.0 and math.isfinite(scale)):
        return dict.fromkeys(arm, 0.0), 0.0
    std = scale * math.sqrt(math.fsum(((s - mean) / scale) ** 2 for s in scores) / n)
    if not (std > 0.0 and math.isfinite(std)):
        return dict.fromkeys(arm, 0.0), 0.0
    z_scores = {doc_id: (score - mean) / std for doc_id, score in arm.items()}
    return z_scores, min(z_scores.values())


def _enumerate_arms(
    scored_rankings: Sequence[ScoredRanking],
) -> list[tuple[int, ScoredRanking]]:
    if isinstance(scored_rankings, str):
        raise FusionError("scored_rankings must be a sequence of rankings, not a str")
    return list(enumerate(scored_rankings))


def _checked_arm(index: int, ranking: ScoredRanking) -> dict[str, float]:
    """The ranking as id -> score, first occurrence kept, in order; validated."""
    if isinstance(ranking, str):
        raise FusionError(f"scored_rankings[{index}] is a str; expected (id, score) pairs")
    arm: dict[str, float] = {}
    for position, entry in enumerate(ranking):
        if type(entry) is tuple and len(entry) == 2:  # the common case, checked cheaply
            doc_id, score = entry
            if type(doc_id) is str and type(score) is float and math.isfinite(score):
                if doc_id not in arm:
                    arm[doc_id] = score
                continue
        if isinstance(entry, str) or not isinstance(entry, Sequence) or len(entry) != 2:
            raise FusionError(
                f"scored_rankings[{index}][{position}] must be an (id, score) pair, got {entry!r}"
            )
        doc_id, score = entry
        if not isinstance(doc_id, str):
            raise FusionError(f"scored_rankings[{index}][{position}]: ids must be str")
        if isinstance(score, bool) or not isinstance(score, numbers.Real):
            raise FusionError(
                f"scored_rankings[{index}][{position}]: score must be a real number, got {score!r}"
            )
        try:
            value = float(score)
        except OverflowError:  # an int or Fraction past float's range
            value = math.inf
        if not math.isfinite(value):
            raise FusionError(
                f"scored_rankings[{index}][{position}]: score must be finite, got {score!r}"
            )
        arm.setdefault(doc_id, value)
    return arm
