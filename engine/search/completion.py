"""Each arm also ranks the candidates only the other arm found.

A hybrid search fuses two windows of ``window`` candidates each. A candidate that only
one arm found has no place at all in the other arm's list, so fusion treats "ranked
101st" and "ranked last" alike: a document the keyword arm ranks 3rd and the vector arm
ranks just past its window scores exactly like one the vector arm considers unrelated.

``complete_windows`` closes that gap: the keyword arm runs the same query restricted to
the vector arm's extra candidates (``within``; a document matching no query term stays
unranked), the vector arm scores the keyword arm's extra candidates exactly from their
stored vectors (an allow-list of those ids), and each arm's answers are appended after
its own window, in its own order. The windows themselves are untouched, so a
candidate's rank within its arm's window is what it was; past the window, a rank orders
the other arm's candidates. Fusion then runs unchanged over the completed lists (RRF
over ranks, z-scores over the union's scores).

An arm whose window came back short already holds every document it can rank, so it
is not asked. Measured (``bench``, README): nDCG@10 rose on every corpus and on
SciFact's training judgements, at the cost of one restricted keyword search and one
exact scoring of at most ``window`` vectors per hybrid search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from sparse import KeywordHit

DenseList = Sequence[tuple[str, float]]
"""``(source id, cosine similarity)``, best first."""

KeywordScorer = Callable[[list[str]], Sequence[KeywordHit]]
"""The keyword arm's hits among the given ids, best first."""

VectorScorer = Callable[[list[str]], DenseList]
"""The vector arm's scores of the given ids (those with a vector), best first."""

T = TypeVar("T")


def extra_candidates(
    sparse_ids: Sequence[str], dense_ids: Sequence[str], window: int
) -> tuple[list[str], list[str]]:
    """The ids the keyword arm should score (the vector window's, not in the keyword
    window) and those the vector arm should score (the other way round), best first in
    the arm that found them. Empty for an arm whose window came back short."""
    in_sparse, in_dense = set(sparse_ids), set(dense_ids)
    for_keyword = [i for i in dense_ids if i not in in_sparse] if len(sparse_ids) >= window else []
    for_vector = [i for i in sparse_ids if i not in in_dense] if len(dense_ids) >= window else []
    return for_keyword, for_vector


def shard_extras(
    vector_ids: Sequence[str], keyword_ids: Sequence[str]
) -> tuple[list[str], list[str]]:
    """One shard's part of completing a sharded search, computed by the shard before the
    global vector window is known: its vector candidates outside the global keyword
    window (``keyword_ids``: that window's documents this shard holds), for the keyword
    arm to score, and those documents outside its own vector window, for the vector arm
    to score. Over all shards these cover ``extra_candidates`` of the global windows: a
    document in the global vector window is in its shard's vector window, and one
    outside its shard's vector window is outside the global one."""
    in_vector, in_keyword = set(vector_ids), set(keyword_ids)
    for_keyword = [i for i in vector_ids if i not in in_keyword]
    for_vector = [i for i in keyword_ids if i not in in_vector]
    return for_keyword, for_vector


def complete_windows(
    sparse: Sequence[KeywordHit],
    dense: DenseList,
    window: int,
    *,
    keyword_scores: KeywordScorer,
    vector_scores: VectorScorer,
) -> tuple[list[KeywordHit], list[tuple[str, float]]]:
    """Both windows, each followed by its arm's order of the other arm's extra
    candidates (see the module docstring). ``window`` is the size both arms were asked
    for; an answer from a scorer outside the ids it was given is ignored."""
    for_keyword, for_vector = extra_candidates(
        [hit.source_id for hit in sparse], [doc_id for doc_id, _ in dense], window
    )
    sparse_out = list(sparse)
    dense_out = list(dense)
    if for_keyword:
        sparse_out += _asked(keyword_scores(for_keyword), for_keyword, lambda hit: hit.source_id)
    if for_vector:
        dense_out += _asked(vector_scores(for_vector), for_vector, lambda pair: pair[0])
    return sparse_out, dense_out


def _asked(answers: Sequence[T], asked: list[str], key: Callable[[T], str]) -> list[T]:
    """``answers`` whose id was asked for, each id once (the windows already are)."""
    wanted = set(asked)
    out: list[T] = []
    for answer in answers:
        doc_id = key(answer)
        if doc_id in wanted:
            wanted.discard(doc_id)
            out.append(answer)
    return out
