"""A fused page turned into the passages a search returns.

Every answer is built here whichever strategy ran: each id is checked against the store
(still present, public, eligible under the filters — an index may lag the store), and
each passage gets its title, URL and excerpt from the store, so nothing in a ``Passage``
reveals the strategy or the arm that found it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from engine.documents import ArmRanks, Passage
from engine.search.excerpts import excerpt_for, make_excerpt, query_terms
from engine.storage import DocumentStore
from fusion import FusedHit
from sparse import FieldFilter, KeywordHit, KeywordSearchFacade


class AnswerSources(Protocol):
    """What building passages reads: the store and the index-backed keyword facade."""

    @property
    def store(self) -> DocumentStore: ...

    @property
    def keyword_index_backed(self) -> KeywordSearchFacade: ...


def build_passages(
    sources: AnswerSources,
    page: Sequence[FusedHit],
    sparse_hits: Sequence[KeywordHit],
    text: str,
    language: int | None,
    filters: tuple[FieldFilter, ...] = (),
) -> list[Passage]:
    """The passages for ``page``, in its order, that the store confirms public and
    eligible. An excerpt a keyword hit carries is kept, with the title, URL and language
    read with its text; the others are cut from the store's text by the same rule
    (``_excerpt_cutter``)."""
    if not page:
        return []
    # A hit cut from the store's text carries the title, URL and language read with it:
    # those, not a header read later (a write may land in between), go with its excerpt.
    cut = {h.source_id: h for h in sparse_hits if h.excerpt}
    # Defence in depth: whatever an arm returned, only ids the store confirms public
    # (still present, and eligible under the filters: an index may lag the store)
    # become passages. Also supplies the text of hits that came without an excerpt
    # (dense-only hits, and every hit of the hybrid keyword arm).
    needs_text = frozenset(f.id for f in page if f.id not in cut)
    docs = sources.store.headers([f.id for f in page], with_text=needs_text, filters=filters)
    cutter: Callable[[str], str] | None = None
    passages: list[Passage] = []
    for fused in page:
        doc = docs.get(fused.id)
        if doc is None:
            continue
        title, url, doc_language, doc_text = doc
        hit = cut.get(fused.id)
        if hit is not None:
            title, url, doc_language, excerpt = hit.title, hit.url, hit.language_id, hit.excerpt
        else:
            if cutter is None:
                cutter = _excerpt_cutter(sources, text, language)
            excerpt = cutter(doc_text or "")
        passages.append(
            Passage(
                source_id=fused.id,
                title=title,
                url=url,
                excerpt=excerpt,
                language_id=doc_language,
                score=fused.score,
                ranks=_arm_ranks(fused.ranks),
            )
        )
    return passages


def _excerpt_cutter(
    sources: AnswerSources, text: str, language: int | None
) -> Callable[[str], str]:
    """Cuts excerpts as the keyword index cuts its hits' (the query's words, rarest in the
    index first), so a passage's excerpt is the same whichever strategy ran and whichever
    arm found it; with no word from the index (unavailable, or a short query) anchored on
    the query word rarest in the text instead."""
    terms = sources.keyword_index_backed.excerpt_terms(text, language) if text else []
    if terms:
        return lambda doc_text: make_excerpt(doc_text, terms)
    words = query_terms(text)
    return lambda doc_text: excerpt_for(doc_text, words)


def _arm_ranks(ranks: tuple[int | None, ...]) -> ArmRanks:
    return ArmRanks(sparse=ranks[0], dense=ranks[1] if len(ranks) > 1 else None)
