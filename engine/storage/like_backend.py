"""The always-available database fallback: LIKE over the document store (priority 0).

It implements ``sparse.SearchBackend`` so it joins the full keyword cascade behind the
tantivy index. Relevance is crude on purpose (term presence, title counted double); it
exists so that a corpus whose index is gone still answers "find the page about X".
Filters on declared fields are SQL conditions over ``document_fields``, in the same query.

Terms match case-insensitively in every script, as the index's lower-casing makes them:
an ASCII term through ``LIKE`` (SQLite folds ASCII case only), any other through ``GLOB``
with a character class per cased letter (``москва`` is ``*М[Оо][Сс][Кк][Вв][Аа]*`` or
``*м[Оо][Сс][Кк][Вв][Аа]*``), so the comparison stays in SQLite's C over the stored text
with no function to register on the store's per-thread connections (a Python function
called on every row was slower still). A term with accents matches text stored composed
or decomposed (the index reads both as NFC). A non-ASCII term that occurs nowhere costs
about twice a ``LIKE`` scan (20,000 texts of 1.5 KB: 146 ms, ``LIKE`` 68 ms), one that
occurs often less.
"""

from __future__ import annotations

import functools
import unicodedata
from collections.abc import Mapping

from engine.search.excerpts import excerpt_for, query_terms
from engine.storage import DocumentStore
from engine.storage.field_sql import filter_sql
from sparse import AccessContext, EvidenceSource, RetrievalQuery

_MAX_LIKE_TERMS = 8


def _like_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _term_match(column: str, term: str) -> tuple[str, list[object]]:
    """SQL true where ``column`` holds ``term`` whatever the case of either, and its
    parameters. ``term`` is a word (``query_terms``): no ``GLOB`` metacharacter."""
    if term.isascii():
        return f"{column} LIKE ? ESCAPE '\\'", [_like_pattern(term)]
    forms = dict.fromkeys([term, unicodedata.normalize("NFD", term)])
    patterns: list[object] = [p for form in forms for p in _glob_patterns(form)]
    sql = " OR ".join(f"{column} GLOB ?" for _ in patterns)
    return f"({sql})", patterns


def _glob_patterns(term: str) -> list[str]:
    """``*term*`` with each cased character a class of its case forms (``GLOB`` compares
    exactly; its ``[...]`` classes read UTF-8 characters) — one pattern for each form of
    the first character: after ``*`` SQLite skips to a plain character quickly but tries
    a class at every position (a class first scanned 20,000 texts 2x slower than two
    patterns, one each for ``М`` and ``м``)."""
    rest = "".join(
        forms if len(forms := _case_forms(character)) == 1 else f"[{forms}]"
        for character in term[1:]
    )
    return [f"*{first}{rest}*" for first in _case_forms(term[0])]


def _case_forms(character: str) -> str:
    """Every character that case-folds as ``character`` does (``σ``: ``Σσς``), or
    ``character`` alone."""
    key = _case_key(character)
    if key is not None and ord(character) < 0x10000:
        return _bmp_case_forms().get(key, character)
    forms = {character, *(f for f in (character.lower(), character.upper()) if len(f) == 1)}
    return "".join(sorted(forms))


def _case_key(character: str) -> str | None:
    """The one character ``character`` case-folds to, else the one it lower-cases to
    (``ẞ`` and ``ß`` fold to ``ss``: one length a position cannot change), else None."""
    folded = character.casefold()
    if len(folded) == 1:
        return folded
    lowered = character.lower()
    return lowered if len(lowered) == 1 else None


@functools.cache
def _bmp_case_forms() -> Mapping[str, str]:
    """Case key -> the characters that have it, for the Basic Multilingual Plane (built
    on first use, ~30 ms: the fallback runs while the index is unavailable, not at import).
    It includes what no single case mapping reaches: ``ς`` from ``σ``, ``ſ`` from ``s``."""
    groups: dict[str, set[str]] = {}
    for code in range(0x10000):
        character = chr(code)
        key = _case_key(character)
        if key is not None and key != character:
            groups.setdefault(key, {key}).add(character)
    return {key: "".join(sorted(forms)) for key, forms in groups.items()}


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
        matches = [(_term_match("title", t), _term_match("text", t)) for t in terms]
        for (in_title, title_params), (in_text, text_params) in matches:
            score_parts.append(
                f"(CASE WHEN {in_title} THEN 2 ELSE 0 END) + "
                f"(CASE WHEN {in_text} THEN 1 ELSE 0 END)"
            )
            params += title_params + text_params
        for (in_title, title_params), (in_text, text_params) in matches:
            match_parts.append(f"{in_title} OR {in_text}")
            params += title_params + text_params
        where = f"({' OR '.join(match_parts)})"
        if access.is_public_only:
            where += " AND is_public = 1"
        if query.language_id is not None:
            where += " AND language_id = ?"
            params.append(query.language_id)
        if query.filters:
            condition, filter_params = filter_sql(
                query.filters, rows=self._store.field_rows(public_only=access.is_public_only)
            )
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
