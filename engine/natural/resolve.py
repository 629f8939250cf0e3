"""Resolution: the model's extracted values matched against the store's declared values.

After the model answered — never before, and never by sending records to it — each value
extracted for a keyword field is looked up among that field's stored values: equal
ignoring ASCII case (every such stored value applies), or else the one stored value
that contains it ("Walter" -> "Walter Benjamin"; two or more candidates are ambiguous).
A value that resolves becomes a filter; one that does not falls back to keyword text.
Integer and date ranges apply as given (bounds in the wrong order are swapped).
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol

from engine.filters import And, Eq, Filter, In, Range
from engine.natural.answer import ExtractedValue, Interpretation
from engine.natural.schema import ModelQuery

MAX_MATCHES = 8
"""At most this many stored values apply for one extracted value."""


class ValueLookup(Protocol):
    """The store's read of declared keyword values (``DocumentStore.keyword_values``)."""

    def keyword_values(self, field: str, value: str, limit: int) -> list[str]: ...


def resolve_value(lookup: ValueLookup, field: str, value: str) -> tuple[str, ...]:
    matches = lookup.keyword_values(field, value, MAX_MATCHES)
    exact = [m for m in matches if m.casefold() == value.casefold()]
    if exact:
        return tuple(exact)
    return tuple(matches) if len(matches) == 1 else ()


def interpret(query: ModelQuery, lookup: ValueLookup) -> Interpretation:
    """The interpretation of a checked model answer: text to search and filters to apply."""
    values: list[ExtractedValue] = []
    clauses: list[Filter] = []
    unresolved: list[str] = []
    for field, extracted in query.values:
        resolved_here: list[str] = []
        for value in extracted:
            resolved = resolve_value(lookup, field, value)
            values.append(ExtractedValue(field=field, extracted=value, resolved=resolved))
            if resolved:
                resolved_here.extend(resolved)
            else:
                unresolved.append(value)
        wanted = tuple(dict.fromkeys(resolved_here))
        if len(wanted) == 1:
            clauses.append(Eq(field, wanted[0]))
        elif wanted:
            clauses.append(In(field, wanted))
    ranges: list[Range] = []
    for field, low, high in query.ranges:
        if low is not None and high is not None and _after(low, high):
            low, high = high, low
        ranges.append(Range(field, gte=low, lte=high))
    clauses.extend(ranges)
    text = " ".join(dict.fromkeys([*query.keywords, *unresolved]))
    filters: Filter | None = None
    if len(clauses) == 1:
        filters = clauses[0]
    elif clauses:
        filters = And(*clauses)
    return Interpretation(
        keywords=query.keywords,
        query=text,
        values=tuple(values),
        ranges=tuple(ranges),
        filters=filters,
    )


def _after(low: int | dt.date, high: int | dt.date) -> bool:
    return low > high  # type: ignore[operator]  # both ints or both dates (one field)
