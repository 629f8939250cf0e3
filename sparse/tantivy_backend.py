"""The tantivy backend: BM25 over a ``TantivyIndex``, index-backed (priority > 0).

Query text is never parsed as tantivy query syntax. It is split on whitespace and each
word is run through the same analyzer the documents went through; the resulting terms
are OR-ed as plain term queries (BM25). A term the query repeats weighs its count (query
term frequency, as Lucene, Pyserini and bm25s count it: the term clause is boosted by the
count), so a long natural-language query stresses what it says most. Measured, nDCG@10
on test judgements: CISI (51 of 76 queries repeat a term) 0.3144 -> 0.3686, Cranfield
0.3673 -> 0.3687, SciFact 0.6859 -> 0.6838 (train 0.6995 -> 0.6957); a saturated count
(BM25's k3 = 1, 2, 8) was no better anywhere but SciFact-test, so the plain count stays.
Quotes, colons,
parentheses, ``AND``/``OR``/``NOT``, ``field:value``, emoji and control characters are
therefore just text, and a 10,000-character token is dropped by the analyzer (it matches
nothing) - user text cannot raise a syntax error.

Filters run inside the tantivy query (never by post-filtering the top k), and so does
``within`` (a clause on the id field: term queries, or a term set past 256 ids): ``public`` is
required (the index carries no access groups yet, so every ``AccessContext`` searches
public documents only), and a ``language_id`` restricts both the field (that language's
analyzer) and the documents. ``language_id=None`` searches every analyzer field that
holds documents. Each of ``query.filters`` is one more required, zero-scoring clause: a
term-set query on a keyword field, a range query on an integer field; the index's
declared fields must include every filtered field (``ValueError`` otherwise). Filters
never change a hit's BM25 score, only which documents are eligible.

Order: score descending, equal scores by ``source_id`` ascending - never by tantivy's
document address, which depends on which indexing thread and segment took a document, so
two builds of one corpus would order ties (and cut the top ``limit`` among them)
differently. A tie across the cut is resolved by reading every hit with the cut-off
score (up to ``MAX_TIE_FETCH`` hits).

Excerpts anchor on the query's word forms rarest in the index (``excerpt_terms``, a
document-frequency look-up per term; the first that occurs in the text at a word start
places the window, ``sparse.excerpt``), cut from the stored body or, for an index that
keeps no text, from the texts its owner hands the backend (``texts``).
"""

from __future__ import annotations

import logging
import math
import string
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import tantivy

from sparse.analyzers import Analyzer
from sparse.contracts import (
    AccessContext,
    EvidenceSource,
    FieldFilter,
    FieldKind,
    RangeFilter,
    RetrievalQuery,
    TermsFilter,
    TermStatistics,
)
from sparse.errors import SparseError, SparseIndexCorruptError, is_contained
from sparse.excerpt import make_excerpt
from sparse.tantivy_index import IndexView, TantivyIndex
from sparse.tantivy_schema import (
    F_BODY,
    F_ID,
    F_LANGUAGE,
    F_PAGE_UID,
    F_PUBLIC,
    F_TITLE,
    F_URL,
    field_name_for,
)

logger = logging.getLogger(__name__)

MAX_QUERY_TERMS = 256
"""Distinct terms per analyzer field kept from one query (the rest are ignored)."""

MAX_EXCERPT_TERMS = 8
"""The rarest query terms an excerpt looks for (each costs a scan of the body)."""

MAX_TIE_FETCH = 4_096
"""Hits read at most to order a tie across the cut (past it, index order decides)."""


class StoredBody(NamedTuple):
    """A document as its owner holds it now: what a hit shows, read in one go so that
    the title, URL and language a hit carries belong to the text its excerpt is cut
    from (an update between two reads would pair one version's title with another's
    excerpt)."""

    title: str
    url: str
    language_id: int
    text: str


TextSource = Callable[[Sequence[str]], Mapping[str, StoredBody]]
"""Source ids -> their documents as the owner holds them, for an index that keeps no
text (ids it does not know are left out)."""

_INT64_MAX = 2**63 - 1
_PUNCTUATION = string.punctuation + "\u201c\u201d\u2018\u2019\u00ab\u00bb"


class TantivyBackend:
    """``SearchBackend`` over a ``TantivyIndex``; ``search`` may raise ``SparseError``.

    ``texts`` serves an index built with ``store_text=False``: the hits' bodies are read
    from their owner (one call per search, for the hits returned) so that excerpts still
    anchor on the query term rarest in the index; a hit the owner answers for carries the
    owner's title, URL and language, of the same version as its excerpt. Without it such
    an index's hits carry no excerpt.
    """

    def __init__(
        self, index: TantivyIndex, priority: int = 10, *, texts: TextSource | None = None
    ) -> None:
        if isinstance(priority, bool) or not isinstance(priority, int) or priority < 1:
            raise ValueError(f"an index-backed engine needs priority >= 1, got {priority!r}")
        self._index = index
        self._priority = priority
        self._texts = texts

    @property
    def name(self) -> str:
        return "tantivy"

    @property
    def priority(self) -> int:
        return self._priority

    @property
    def index(self) -> TantivyIndex:
        return self._index

    def is_available(self) -> bool:
        return self._index.is_available()

    def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
        """Best-first public hits for ``query``; see the module docstring."""
        language_id = query.language_id
        if _impossible(language_id):
            return []
        view = self._index.view()
        clauses: list[tuple[tantivy.Occur, tantivy.Query]] = []
        fields = self._analyzed(view, query.text, language_id)
        weight = _idf_weights(view, query.statistics)
        for field, terms in fields:
            for term, (count, _) in terms.items():
                clause = tantivy.Query.term_query(view.schema, field, term, index_option="freq")
                # Query term frequency: the clause weighs the term's count.
                boost = float(count) * weight(field, term)
                if boost != 1.0:
                    clause = tantivy.Query.boost_query(clause, boost)
                clauses.append((tantivy.Occur.Should, clause))
        if not clauses or (query.within is not None and not query.within):
            return []
        filters = [self._filter_query(view.schema, f) for f in query.filters]
        if any(f is None for f in filters):
            return []  # a condition nothing can satisfy
        if query.within is not None:
            filters.append(_one_of(view.schema, F_ID, sorted(query.within)))
        required = [f for f in filters if f is not None]
        excerpt_terms = _rarest_first(view, fields) if query.excerpts else []
        return self._run(
            view, clauses, query.limit, language_id, excerpt_terms, required, query.excerpts
        )

    def excerpt_terms(self, text: str, language_id: int | None) -> list[str]:
        """The lowercase word forms this backend's excerpts for ``text`` anchor on, rarest
        in the index first (at most ``MAX_EXCERPT_TERMS``): ``make_excerpt`` with them cuts
        the excerpt a search for ``text`` with ``language_id`` gives a hit."""
        if _impossible(language_id):
            return []
        view = self._index.view()
        return _rarest_first(view, self._analyzed(view, text, language_id))

    def term_statistics(self, text: str, language_id: int | None) -> TermStatistics:
        """This index's statistics for the terms a search for ``text`` with
        ``language_id`` runs (``TermStatistics``; no terms for an impossible language)."""
        if _impossible(language_id):
            return TermStatistics(0)
        view = self._index.view()
        freqs = tuple(
            ((field, term), view.searcher.doc_freq(field, term))
            for field, terms in self._analyzed(view, text, language_id)
            for term in terms
        )
        return TermStatistics(view.documents, freqs)

    def _analyzed(
        self, view: IndexView, text: str, language_id: int | None
    ) -> list[tuple[str, dict[str, tuple[int, list[str]]]]]:
        """(analyzer field, ``_terms``) for each analyzer a search for ``text`` runs on:
        the language's, or every one in use when ``language_id`` is None."""
        if language_id is None:
            analyzers = view.analyzers_in_use
        else:
            analyzers = (self._index.analyzers.for_language(language_id),)
        return [
            (analyzer.field_name, self._terms(analyzer, analyzer.prepare(text).split()))
            for analyzer in analyzers
        ]

    def _filter_query(self, schema: tantivy.Schema, condition: FieldFilter) -> tantivy.Query | None:
        """The tantivy clause for one filter condition; None when it matches nothing."""
        kind = self._index.fields.get(condition.field)
        name = field_name_for(condition.field)
        if isinstance(condition, TermsFilter):
            if not condition.values:
                return None
            wanted = (
                FieldKind.KEYWORD if isinstance(condition.values[0], str) else FieldKind.INTEGER
            )
            if kind is not wanted:
                raise ValueError(f"field {condition.field!r} is not a {wanted.value} field")
            return _one_of(schema, name, condition.values)
        if isinstance(condition, RangeFilter):
            if kind is not FieldKind.INTEGER:
                raise ValueError(f"field {condition.field!r} is not an integer field")
            low, high = condition.low, condition.high
            if low is not None and high is not None and low > high:
                return None
            return tantivy.Query.range_query(
                schema, name, tantivy.FieldType.Integer, low, high, True, True
            )
        raise ValueError(f"unknown filter {type(condition).__name__}")

    def _terms(self, analyzer: Analyzer, words: list[str]) -> dict[str, tuple[int, list[str]]]:
        """Analyzed term -> (its count in the query, the lowercase forms to look for in an
        excerpt, stem first), in first-occurrence order; at most ``MAX_QUERY_TERMS``
        distinct terms (later new terms are ignored, known ones still counted)."""
        text_analyzer = self._index.query_analyzers[analyzer]
        counts: dict[str, int] = {}
        surfaces: dict[str, list[str]] = {}
        for word in words:
            tokens = text_analyzer.analyze(word)
            surface = word.strip(_PUNCTUATION).lower()
            for token in tokens:
                if token not in counts:
                    if len(counts) >= MAX_QUERY_TERMS:
                        continue
                    counts[token] = 0
                    surfaces[token] = [token]
                counts[token] += 1
                forms = surfaces[token]
                single = len(tokens) == 1 and surface and not surface.startswith(token)
                if single and surface not in forms:
                    forms.append(surface)  # e.g. happi -> happy
        return {term: (count, surfaces[term]) for term, count in counts.items()}

    def _run(
        self,
        view: IndexView,
        clauses: list[tuple[tantivy.Occur, tantivy.Query]],
        limit: int,
        language_id: int | None,
        excerpt_terms: list[str],
        filters: list[tantivy.Query],
        excerpts: bool = True,
    ) -> list[EvidenceSource]:
        schema = view.schema
        searcher = view.searcher
        must = [tantivy.Query.boolean_query(clauses)]
        # Public-only. When this snapshot holds no non-public document at all (deleted
        # ones still count, so the check errs on the safe side) the clause would match
        # every document and only cost a conjunction over the whole index.
        if searcher.doc_freq(F_PUBLIC, False) > 0:
            public = tantivy.Query.term_query(schema, F_PUBLIC, True)
            must.append(tantivy.Query.const_score_query(public, 0.0))
        if language_id is not None:
            language = tantivy.Query.term_query(schema, F_LANGUAGE, language_id)
            must.append(tantivy.Query.const_score_query(language, 0.0))
        must.extend(tantivy.Query.const_score_query(f, 0.0) for f in filters)
        query = tantivy.Query.boolean_query([(tantivy.Occur.Must, q) for q in must])
        ranked = _ranked(searcher, query, limit)
        bodies: Mapping[str, StoredBody] | None = None
        if excerpts and self._texts is not None and not self._index.stores_text:
            bodies = self._texts([source_id for _, source_id, _ in ranked])
        sources: list[EvidenceSource] = []
        for score, source_id, stored in ranked:
            page_uid = stored.get_first(F_PAGE_UID)
            hit_language = stored.get_first(F_LANGUAGE)
            if hit_language is None:  # every document is written with one
                raise SparseIndexCorruptError(f"a hit without a language: {source_id!r}")
            body = None if bodies is None else bodies.get(source_id)
            if body is not None:  # the owner's, of one version with the excerpt's text
                title, url, shown_language, text = body
                excerpt = make_excerpt(text, excerpt_terms)
            else:
                title, url = _text(stored, F_TITLE), _text(stored, F_URL)
                shown_language = int(hit_language)
                excerpt = ""
                if excerpts and bodies is None:
                    excerpt = make_excerpt(_text(stored, F_BODY), excerpt_terms)
            sources.append(
                EvidenceSource(
                    source_id=source_id,
                    title=title,
                    url=url,
                    excerpt=excerpt,
                    language_id=shown_language,
                    score=score,
                    page_uid=None if page_uid is None else int(page_uid),
                )
            )
        return sources


def _impossible(language_id: int | None) -> bool:
    """A language id no document can carry (tantivy stores them as signed 64-bit)."""
    return language_id is not None and not 0 <= language_id <= _INT64_MAX


def _idf(documents: int, doc_freq: int) -> float:
    """BM25's idf as tantivy computes it (Lucene's, never negative)."""
    return math.log(1.0 + (documents - doc_freq + 0.5) / (doc_freq + 0.5))


def _idf_weights(view: IndexView, statistics: TermStatistics | None) -> Callable[[str, str], float]:
    """(field, term) -> the factor that makes a term clause score with ``statistics``'
    idf instead of this index's (``_idf_ratio``); always 1 without statistics."""
    if statistics is None:
        return lambda field, term: 1.0
    given = dict(statistics.doc_freqs)
    return lambda field, term: _idf_ratio(
        view.documents,
        view.searcher.doc_freq(field, term),
        statistics.documents,
        given.get((field, term)),
    )


def _idf_ratio(
    documents: int, doc_freq: int, given_documents: int, given_doc_freq: int | None
) -> float:
    """What a term clause's boost is multiplied by so that it scores with the given
    statistics' idf instead of this index's: their ratio. 1 for a term the statistics
    do not name or this index does not hold (its clause matches nothing here). The given
    counts are read as at least this index's own: they describe a collection containing
    it."""
    if given_doc_freq is None or doc_freq <= 0:
        return 1.0
    local_documents = max(documents, doc_freq)
    given_doc_freq = max(given_doc_freq, doc_freq)
    given_documents = max(given_documents, local_documents, given_doc_freq)
    return _idf(given_documents, given_doc_freq) / _idf(local_documents, doc_freq)


def _rarest_first(
    view: IndexView, fields: list[tuple[str, dict[str, tuple[int, list[str]]]]]
) -> list[str]:
    """The query's word forms to anchor an excerpt on, rarest term in the index first."""
    rarest = [
        (view.searcher.doc_freq(field, term), surface)
        for field, terms in fields
        for term, (_, surfaces) in terms.items()
        for surface in surfaces
    ]
    rarest.sort(key=lambda pair: pair[0])
    return list(dict.fromkeys(surface for _, surface in rarest))[:MAX_EXCERPT_TERMS]


_MAX_TERM_CLAUSES = 256
"""Up to this many values, a "one of these values" clause (``within`` on the id field, a
keyword-field filter) is a disjunction of term queries (a dictionary lookup each); past
it, one term-set query (which streams the field's dictionary through an automaton).
Measured on SciFact's 5,183 ids, inside a BM25 query: 20 ids 0.29 vs 0.82 ms, 100 ids
1.04 vs 1.63 ms, 300 ids 2.9 ms both, 500 ids 4.2 vs 3.4 ms."""


def _one_of(schema: tantivy.Schema, field: str, values: Sequence[str | int]) -> tantivy.Query:
    """A clause matching exactly the documents whose ``field`` holds one of ``values``."""
    if len(values) > _MAX_TERM_CLAUSES:
        return tantivy.Query.term_set_query(schema, field, list(values))
    terms = [
        (tantivy.Occur.Should, tantivy.Query.term_query(schema, field, v, index_option="basic"))
        for v in values
    ]
    return tantivy.Query.boolean_query(terms)


def _ranked(
    searcher: tantivy.Searcher, query: tantivy.Query, limit: int
) -> list[tuple[float, str, tantivy.Document]]:
    """The top ``limit`` (score, source id, stored document) triples: score descending,
    then ``source_id`` ascending (see the module docstring).

    Fetches one hit past the cut; while that one still ties the last kept score, fetches
    twice as many, so every document with the cut-off score is read before the cut.
    Fields are read one by one (``get_first``): a hit's ``to_dict`` cost twice as much.
    """
    try:
        return _read_ranked(searcher, query, limit)
    except BaseException as exc:
        # tantivy answers a segment it cannot read (damaged postings, a damaged document
        # store) with a ValueError or a panic, though the index opened fine.
        if isinstance(exc, SparseError) or not is_contained(exc):
            raise
        raise SparseIndexCorruptError(
            f"the keyword index could not be read ({type(exc).__name__})"
        ) from exc


def _read_ranked(
    searcher: tantivy.Searcher, query: tantivy.Query, limit: int
) -> list[tuple[float, str, tantivy.Document]]:
    cap = max(MAX_TIE_FETCH, limit + 1)
    fetch = limit + 1
    while True:
        hits = searcher.search(query, fetch, count=False).hits
        if len(hits) < fetch or hits[limit - 1][0] > hits[-1][0] or fetch >= cap:
            break
        fetch = min(fetch * 2, cap)
    if len(hits) > limit:
        cut = hits[limit - 1][0]
        hits = [hit for hit in hits if hit[0] >= cut]
    ranked = []
    for score, address in hits:
        stored = searcher.doc(address)
        ranked.append((float(score), str(stored.get_first(F_ID)), stored))
    ranked.sort(key=lambda hit: (-hit[0], hit[1]))
    return ranked[:limit]


def _text(stored: tantivy.Document, field: str) -> str:
    value = stored.get_first(field)
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
