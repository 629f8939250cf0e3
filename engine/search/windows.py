"""Internal: one corpus's scored arm windows, for callers that fuse across corpora.

A sharded corpus (``engine.cluster``) asks every shard for its keyword window while it
embeds the query (the keyword arm needs no vector), then for its vector window, merges
each arm across shards by score and fuses the two global rankings once. These are the
frozen values a shard hands back, as columns (they cross a process boundary on every
search, and a tuple of strings pickles far faster than as many small objects); nothing
here is public API.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from dense import FaissIndex
from engine.documents import Passage
from engine.search.visibility import DenseVisibility
from fusion import FusedHit
from sparse import FieldFilter, KeywordHit, KeywordSearchFacade, TermStatistics


@dataclass(frozen=True, slots=True)
class ScoredHit:
    """One candidate of one arm: its id, the arm's score and (keyword arm) its URL.

    ``score`` is tantivy's BM25 score for the keyword arm and the cosine similarity for
    the vector arm; ``None`` when the answering keyword backend has no comparable score
    (the database fallback).
    """

    id: str
    score: float | None
    url: str = ""


@dataclass(frozen=True, slots=True)
class ArmWindow:
    """One arm's candidates from one corpus, best first, as parallel columns.

    ``urls`` is filled for the keyword arm only. ``passages`` holds ready passages
    (placeholder score and ranks) for this corpus's own best candidates of the arm, so
    the caller rarely needs another round trip for excerpts; ``checked`` lists every id a
    passage was looked up for (an id there without a passage is not public, or was
    deleted meanwhile).
    """

    ids: tuple[str, ...] = ()
    scores: tuple[float | None, ...] = ()
    urls: tuple[str, ...] = ()
    passages: tuple[Passage, ...] = ()
    checked: tuple[str, ...] = ()

    def hits(self) -> list[ScoredHit]:
        urls = self.urls or ("",) * len(self.ids)
        return [ScoredHit(i, s, u) for i, s, u in zip(self.ids, self.scores, urls, strict=True)]


class _Indexes(Protocol):
    @property
    def faiss(self) -> FaissIndex | None: ...


class SearchParts(Protocol):
    """What the window functions read from a corpus's search state."""

    @property
    def indexes(self) -> _Indexes: ...

    @property
    def keyword_full(self) -> KeywordSearchFacade: ...

    @property
    def keyword_index_backed(self) -> KeywordSearchFacade: ...

    @property
    def visibility(self) -> DenseVisibility: ...


PassageBuilder = Callable[[Sequence[FusedHit]], list[Passage]]
"""Builds confirmed-public passages for a page of fused hits (the corpus's own code)."""


def keyword_window(
    parts: SearchParts,
    text: str,
    limit: int,
    language: int | None,
    filters: tuple[FieldFilter, ...],
    *,
    index_backed: bool,
    need: int,
    passages: PassageBuilder,
    statistics: TermStatistics | None = None,
) -> ArmWindow:
    """The keyword arm for an already clamped query: ``limit`` hits of the index-backed
    variant (what a hybrid search fuses) or of the full cascade (what a keyword search
    ranks), with passages for the first ``need``; terms scored with ``statistics`` when
    given (a sharded corpus's, summed over its shards)."""
    facade = parts.keyword_index_backed if index_backed else parts.keyword_full
    hits = facade.search(
        text,
        limit,
        language,
        filters=filters,
        excerpts=False,
        statistics=statistics,
        distinct_urls=False,
    )
    top = [FusedHit(h.source_id, 0.0, (rank, None)) for rank, h in enumerate(hits[:need], 1)]
    return ArmWindow(
        ids=tuple(h.source_id for h in hits),
        scores=tuple(h.score for h in hits),
        urls=tuple(h.url for h in hits),
        passages=tuple(passages(top)),
        checked=tuple(f.id for f in top),
    )


def vector_window(
    parts: SearchParts,
    vector: npt.NDArray[np.float32],
    limit: int,
    language: int | None,
    filters: tuple[FieldFilter, ...],
    *,
    need: int,
    covered: Collection[str],
    passages: PassageBuilder,
) -> ArmWindow:
    """The vector arm for a query embedded by the caller: ``limit`` nearest public
    documents by cosine, with passages for the first ``need`` not in ``covered`` (those
    the caller already has). Empty when the corpus holds no vectors of that dimension."""
    index = parts.indexes.faiss
    if index is None or len(index) == 0 or vector.shape[-1] != index.dimension:
        return ArmWindow()
    allow = parts.visibility.allow_list(index, language, filters)
    found = index.search(vector, limit, allow=allow)
    top = [
        FusedHit(doc_id, 0.0, (None, rank))
        for rank, (doc_id, _) in enumerate(found[:need], 1)
        if doc_id not in covered
    ]
    return ArmWindow(
        ids=tuple(doc_id for doc_id, _ in found),
        scores=tuple(float(score) for _, score in found),
        passages=tuple(passages(top)) if top else (),
        checked=tuple(f.id for f in top),
    )


def keyword_scores(
    parts: SearchParts,
    text: str,
    ids: list[str],
    language: int | None,
    filters: tuple[FieldFilter, ...],
    statistics: TermStatistics | None = None,
) -> list[KeywordHit]:
    """The keyword arm's hits among ``ids`` (``engine.search.completion``), best first."""
    facade = parts.keyword_index_backed
    return facade.search(
        text,
        len(ids),
        language,
        filters=filters,
        excerpts=False,
        within=ids,
        statistics=statistics,
        distinct_urls=False,
    )


def vector_scores(
    parts: SearchParts, vector: npt.NDArray[np.float32], ids: list[str]
) -> list[tuple[str, float]]:
    """The vector arm's exact scores of those of ``ids`` that have a vector, best first."""
    index = parts.indexes.faiss
    if not ids or index is None or len(index) == 0 or vector.shape[-1] != index.dimension:
        return []
    return index.search(vector, len(ids), allow=ids)


def completion_windows(
    parts: SearchParts,
    text: str,
    vector: npt.NDArray[np.float32],
    for_keyword: list[str],
    for_vector: list[str],
    language: int | None,
    filters: tuple[FieldFilter, ...],
    statistics: TermStatistics | None = None,
) -> tuple[ArmWindow, ArmWindow]:
    """One shard's part of completing a sharded search: the keyword arm's hits among
    ``for_keyword`` (scored with ``statistics``, as its window was) and the vector arm's
    scores of ``for_vector`` (no passages)."""
    hits = []
    if for_keyword:
        hits = keyword_scores(parts, text, for_keyword, language, filters, statistics)
    scored = vector_scores(parts, vector, for_vector)
    keyword = ArmWindow(
        ids=tuple(h.source_id for h in hits),
        scores=tuple(h.score for h in hits),
        urls=tuple(h.url for h in hits),
    )
    return keyword, ArmWindow(ids=tuple(i for i, _ in scored), scores=tuple(s for _, s in scored))
