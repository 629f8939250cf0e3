"""A search's ranking as a function of the ids it leaves out, and the refill that uses it.

The arms run once; ``Ranking(exclude)`` fuses what they found without ``exclude``. A page
the store check shortens — or any page while the keyword index is known to lag the store
— is ranked again without every candidate the store no longer confirms (``refilled``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from engine.documents import Passage
from engine.search.passages import AnswerSources, build_passages
from fusion import FusedHit
from sparse import FieldFilter, KeywordHit

__all__ = ["Ranked", "Ranking", "refilled", "without"]


@dataclass(frozen=True, slots=True)
class Ranked:
    """One search's fused ranking, with the arms' candidates it was fused from."""

    fused: list[FusedHit]
    sparse_hits: list[KeywordHit]
    dense: Sequence[tuple[str, float]] = ()

    def candidate_ids(self) -> list[str]:
        """Every id either arm offered, once (what a refill has the store confirm)."""
        ids = [hit.source_id for hit in self.sparse_hits]
        ids += [doc_id for doc_id, _ in self.dense]
        return list(dict.fromkeys(ids))


Ranking = Callable[[frozenset[str]], Ranked]
"""A search's ranking, leaving out the ids given: the arms run once, and a page ranked
again without hits the store no longer confirms (``refilled``) re-fuses what they found."""

_REFILL_ROUNDS = 3
"""Times a page is ranked again without unconfirmed hits (each round finds those the
previous one's new candidates brought: a lagging index rarely needs more than one)."""

_Hit = TypeVar("_Hit", KeywordHit, tuple[str, float])


def without(hits: Sequence[_Hit], exclude: frozenset[str]) -> list[_Hit]:
    """``hits`` less those whose id is in ``exclude`` (``hits`` itself when there is
    nothing to leave out and it is a list: every search passes here once)."""
    if not exclude:
        return hits if isinstance(hits, list) else list(hits)
    return [hit for hit in hits if _hit_id(hit) not in exclude]


def _hit_id(hit: KeywordHit | tuple[str, float]) -> str:
    return hit[0] if isinstance(hit, tuple) else hit.source_id


def refilled(
    p: AnswerSources,
    rank: Ranking,
    ranked: Ranked,
    passages: list[Passage],
    skip: int,
    need: int,
    text: str,
    language: int | None,
    filters: tuple[FieldFilter, ...],
) -> list[Passage]:
    """The page again, ranked without the candidates the store no longer confirms.

    An index that lags the store — a writer that died between its store commit and
    its keyword commit, a write landing mid-search — returns documents since deleted
    or made non-public. ``build_passages`` drops them (never shown); left at that,
    the page came back short, with gaps in the arms' ranks, for as long as the lag
    lasted. Ranked again without them, the next candidates fill it. Every candidate
    of both arms is checked, not only the page's: a stale one above the page moves
    the ranks (RRF) or the window's mean and spread (z-scores) of those below it, so
    excluding only what each page happened to see ranked every page differently —
    pages repeated and skipped documents. A few rounds at most, each one store read
    of the candidates. ``passages``: the page as first built."""
    exclude: frozenset[str] = frozenset()
    for _ in range(_REFILL_ROUNDS):
        ids = ranked.candidate_ids()
        confirmed = p.store.headers(ids, filters=filters)
        stale = frozenset(sid for sid in ids if sid not in confirmed) - exclude
        if not stale:
            break
        exclude |= stale
        ranked = rank(exclude)
        page = ranked.fused[skip:need]
        passages = build_passages(p, page, ranked.sparse_hits, text, language, filters)
    return passages
