"""Filterable metadata fields: the values a document carries, checked and encoded.

A corpus declares its fields in ``CorpusConfig.fields`` (name -> ``FieldType``). A
``Document`` carries values in ``Document.fields``: one value, or a collection of values
(a multi-valued field, e.g. tags), per declared field. Encoded for the store and the
keyword index, every value is a ``str`` (keyword) or an ``int`` (integer; a date is its
day number, days since 1970-01-01), so every range is an integer range.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Collection, Mapping

from engine.config import FieldType
from engine.documents import is_utf8_encodable
from engine.errors import InvalidArgument
from sparse import FieldKind

FieldValue = str | int | dt.date
"""One value of a filterable field, as callers pass it."""

EncodedFields = tuple[tuple[str, str | int], ...]
"""A document's field values as stored and indexed: sorted ``(field, value)`` pairs."""

MAX_VALUES_PER_FIELD = 64
"""A document carries at most this many values for one field."""

MAX_KEYWORD_CHARS = 256
"""A keyword value is 1-256 characters, no control characters."""

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_EPOCH = dt.date(1970, 1, 1).toordinal()

SPARSE_KIND = {
    FieldType.KEYWORD: FieldKind.KEYWORD,
    FieldType.INTEGER: FieldKind.INTEGER,
    FieldType.DATE: FieldKind.INTEGER,
}


ISO_DAY_PATTERN = r"[0-9]{4}-[0-9]{2}-[0-9]{2}"
"""The one form a date takes in text (JSON Lines, filters, the question model's answer)."""
_ISO_DAY = re.compile(ISO_DAY_PATTERN)


def parse_day(text: str) -> dt.date:
    """A ``YYYY-MM-DD`` date; ``ValueError`` for anything else. Stricter than
    ``date.fromisoformat``, which from Python 3.11 also reads week dates (``1942-W01-1``
    is 1941-12-29) and the basic form (``19420315``): a value in another form is refused,
    not stored as some other day."""
    if _ISO_DAY.fullmatch(text) is None:
        raise ValueError(f"not a YYYY-MM-DD date: {text[:20]!r}")
    return dt.date.fromisoformat(text)


def date_to_days(value: dt.date) -> int:
    """Days since 1970-01-01 (negative before it)."""
    return value.toordinal() - _EPOCH


def days_to_date(days: int) -> dt.date:
    return dt.date.fromordinal(days + _EPOCH)


def sparse_kinds(declared: Mapping[str, FieldType]) -> dict[str, FieldKind]:
    """How the keyword index stores each declared field."""
    return {name: SPARSE_KIND[kind] for name, kind in declared.items()}


def is_keyword_value(value: object) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_KEYWORD_CHARS
        and not any(ord(ch) < 32 or ord(ch) == 127 for ch in value)
        and is_utf8_encodable(value)
    )


def is_int64(value: object) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX
    )


def encode_value(field: str, kind: FieldType, value: object) -> str | int:
    """One value checked against its field's type; ``InvalidArgument`` names the field."""
    if kind is FieldType.KEYWORD:
        if not is_keyword_value(value):
            raise InvalidArgument(
                f"field {field!r} is a keyword field: values must be strings of 1-"
                f"{MAX_KEYWORD_CHARS} characters without control characters"
            )
        assert isinstance(value, str)
        return value
    if kind is FieldType.INTEGER:
        if not is_int64(value):
            raise InvalidArgument(
                f"field {field!r} is an integer field: values must be 64-bit integers, "
                f"got {described(value)}"
            )
        assert isinstance(value, int)
        return value
    if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
        raise InvalidArgument(
            f"field {field!r} is a date field: values must be dates (YYYY-MM-DD in JSON, "
            f"datetime.date in Python), got {described(value)}"
        )
    return date_to_days(value)


def described(value: object) -> str:
    """What a refused value is, in words a JSON caller and a Python caller both read."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, int):
        return "an integer" if is_int64(value) else "an integer outside the 64-bit range"
    if isinstance(value, float):
        return "a number with a fraction or exponent"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dt.datetime):
        return "a date with a time"
    if isinstance(value, dt.date):
        return "a date"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _values(field: str, raw: object) -> list[object]:
    if isinstance(raw, str | bytes | int | dt.date) or raw is None:
        return [raw]
    if isinstance(raw, Collection) and not isinstance(raw, Mapping):
        values = list(raw)
        if not values or len(values) > MAX_VALUES_PER_FIELD:
            raise InvalidArgument(
                f"field {field!r} needs 1-{MAX_VALUES_PER_FIELD} values, got {len(values)}"
            )
        return values
    return [raw]


def encode_fields(doc_id: str, fields: object, declared: Mapping[str, FieldType]) -> EncodedFields:
    """A document's field values, checked against the declared fields and encoded.

    Raises ``InvalidArgument`` naming the document and the field for an undeclared field
    or a value of the wrong type.
    """
    if not isinstance(fields, Mapping):
        raise InvalidArgument(f"document {doc_id}: fields must be a mapping of name to value")
    pairs: set[tuple[str, str | int]] = set()
    for name, raw in fields.items():
        kind = declared.get(name) if isinstance(name, str) else None
        if kind is None:
            raise InvalidArgument(
                f"document {doc_id}: unknown field {name!r}; declared fields: "
                f"{sorted(declared) or 'none'}"
            )
        try:
            for value in _values(name, raw):
                pairs.add((name, encode_value(name, kind, value)))
        except InvalidArgument as exc:
            raise InvalidArgument(f"document {doc_id}: {exc}") from None
    return tuple(sorted(pairs, key=lambda pair: (pair[0], repr(pair[1]))))
