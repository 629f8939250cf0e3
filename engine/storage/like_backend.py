"""The always-available database fallback: LIKE over the document store (priority 0).

It implements ``sparse.SearchBackend`` so it joins the full keyword cascade behind the
tantivy index. Relevance is crude on purpose (term presence, title counted double); it
exists so that a corpus whose index is gone still answers "find the page about X".
Filters on declared fields are SQL conditions over ``document_fields``, in the same query.
"""

from __future__ import annotations

from engine.search.excerpts import excerpt_for, query_terms
from engine.storage import DocumentStore
from engine.storage.field_sql import filter_sql
from sparse import AccessContext, EvidenceSource, RetrievalQuery

_MAX_LIKE_TERMS = 8


def _like_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


class DatabaseLikeBackend:
    """``SearchBackend`` at priority 0 over a ``DocumentStore``."""

    def __init__(self, store: DocumentStore) -> None:
        self._store = store

    @property
    def name(self) -> str:
        return "database-like"

    @property
    def priority(self) -> int:
        return 0

    def is_available(self) -> bool:
        return True

    def search(self, query: RetrievalQuery, access: AccessContext) -> list[EvidenceSource]:
        terms = query_terms(query.text)[:_MAX_LIKE_TERMS]
        if not terms:
            return []
        score_parts: list[str] = []
        match_parts: list[str] = []
        params: list[object] = []
        for term in terms:
            score_parts.append(
                "(CASE WHEN title LIKE ? ESCAPE '\\' THEN 2 ELSE 0 END) + "
                "(CASE WHEN text LIKE ? ESCAPE '\\' THEN 1 ELSE 0 END)"
            )
            params += [_like_pattern(term)] * 2
        for term in terms:
            match_parts.append("title LIKE ? ESCAPE '\\' OR text LIKE ? ESCAPE '\\'")
            params += [_like_pattern(term)] * 2
        where = f"({' OR '.join(match_parts)})"
        if access.is_public_only:
            where += " AND is_public = 1"
        if query.language_id is not None:
            where += " AND language_id = ?"
            params.append(query.language_id)
        if query.filters:
            condition, filter_params = filter_sql(query.filters)
            where += f" AND {condition}"
            params += filter_params
        if query.within is not None:
            if not query.within:
                return []
            where += f" AND source_id IN ({','.join('?' * len(query.within))})"
            params += sorted(query.within)
        params.append(query.limit)
        # The text is read only to cut excerpts: a caller ranking ids (or paging deep,
        # cutting its page's excerpts itself) is not sent every hit's whole text.
        text = "text" if query.excerpts else "''"
        sql = (
            f"SELECT source_id, title, url, {text}, language_id, page_uid, "
            f"{' + '.join(score_parts)} AS score FROM documents WHERE {where} "
            f"ORDER BY score DESC, source_id LIMIT ?"
        )
        rows = self._store.connection().execute(sql, params).fetchall()
        return [
            EvidenceSource(
                source_id=str(r[0]),
                title=str(r[1]),
                url=str(r[2]),
                excerpt=excerpt_for(str(r[3]), terms) if query.excerpts else "",
                language_id=int(r[4]),
                score=float(r[6]),
                page_uid=None if r[5] is None else int(r[5]),
            )
            for r in rows
        ]
