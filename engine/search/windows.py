"""Internal: one corpus's scored arm windows, for callers that fuse across corpora.

A sharded corpus (``engine.cluster``) embeds a query once, asks every shard for its
keyword window and its vector window *with scores*, merges each arm across shards by
score and fuses the two global rankings once. These are the frozen values a shard hands
back; nothing here is public API.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from dense import FaissIndex
from engine.config import CorpusConfig
from engine.documents import Passage
from engine.search.fusing import fuse_arms
from engine.search.visibility import DenseVisibility
from fusion import FusedHit
from sparse import FieldFilter, KeywordSearchFacade


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
class ArmWindows:
    """One corpus's ranked candidates for one query, best first in each arm.

    ``sparse`` is the keyword arm (the index-backed variant when a query vector was
    given, the full cascade otherwise); ``dense`` is empty without a query vector.
    ``passages`` holds ready passages (placeholder score and ranks) for the corpus's own
    best fused candidates, so the caller rarely needs a second round trip for excerpts;
    ``checked`` lists every id a passage was looked up for (an id there without a
    passage is not public, or was deleted meanwhile).
    """

    sparse: tuple[ScoredHit, ...]
    dense: tuple[ScoredHit, ...]
    passages: tuple[Passage, ...] = ()
    checked: tuple[str, ...] = ()


class _Indexes(Protocol):
    @property
    def faiss(self) -> FaissIndex | None: ...


class SearchParts(Protocol):
    """What ``arm_windows`` reads from a corpus's search state."""

    @property
    def config(self) -> CorpusConfig: ...

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


def arm_windows(
    parts: SearchParts,
    text: str,
    vector: npt.NDArray[np.float32] | None,
    need: int,
    window: int,
    language: int | None,
    filters: tuple[FieldFilter, ...],
    passages: PassageBuilder,
) -> ArmWindows:
    """One corpus's scored windows for an already clamped query.

    With ``vector`` (embedded by the caller): the index-backed keyword arm and the vector
    arm, ``window`` candidates each — what a hybrid ``Corpus.search`` fuses. Without: the
    full keyword cascade, ``need`` candidates — what a keyword search ranks. Passages are
    built for this corpus's own top ``need`` after fusing its two windows locally (a
    guess at what the caller's global page holds; the caller asks again for the rest).
    """
    dense: tuple[ScoredHit, ...] = ()
    if vector is None:
        hits = parts.keyword_full.search(text, need, language, filters=filters, excerpts=False)
    else:
        hits = parts.keyword_index_backed.search(
            text, window, language, filters=filters, excerpts=False
        )
        index = parts.indexes.faiss
        if index is not None and len(index) > 0 and vector.shape[-1] == index.dimension:
            allow = parts.visibility.allow_list(index, language, filters)
            dense = tuple(
                ScoredHit(doc_id, float(score))
                for doc_id, score in index.search(vector, window, allow=allow)
            )
    sparse = tuple(ScoredHit(h.source_id, h.score, h.url) for h in hits)
    dense_window = None if vector is None else [(h.id, h.score or 0.0) for h in dense]
    local = fuse_arms(parts.config, hits, dense_window, need)
    return ArmWindows(
        sparse=sparse,
        dense=dense,
        passages=tuple(passages(local)),
        checked=tuple(f.id for f in local),
    )
