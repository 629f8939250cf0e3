"""What goes in (``Document``) and what comes out (``Passage`` and friends).

All of them are frozen: change by copy (``dataclasses.replace``), never in place.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from engine.errors import InvalidArgument
from engine.limits import (
    MAX_ACCESS_GROUPS,
    MAX_DOCUMENT_CHARS,
    MAX_LANGUAGE_ID,
    MAX_TITLE_CHARS,
    MAX_URL_CHARS,
    SOURCE_ID_RULE,
    is_valid_source_id,
)


@dataclass(frozen=True, slots=True)
class Document:
    """One source document. ``access_groups`` empty means public.

    Only public documents are ever returned by search, ``evidence``, ``fetch_source`` and
    ``grep``; non-public ones are stored (so widening access later needs no re-ingest).

    ``fields`` holds values for the corpus's declared filterable fields (see
    ``CorpusConfig.fields``): a ``str``, ``int`` or ``datetime.date`` per field, or a
    collection of them for a multi-valued field. It is checked against the corpus's
    declarations at ``add`` (unknown field or wrong type: ``InvalidArgument``).
    """

    id: str
    title: str = ""
    text: str = ""
    url: str = ""
    language_id: int = 0
    access_groups: frozenset[str] = field(default_factory=frozenset)
    page_uid: int | None = None
    fields: Mapping[str, FieldInput] = field(
        default_factory=lambda: MappingProxyType({}), hash=False
    )

    @property
    def is_public(self) -> bool:
        return not self.access_groups

    def __reduce__(self) -> tuple[object, ...]:
        # ``fields`` may be a MappingProxyType (the default, and after validation), which
        # does not pickle: rebuilt from a plain dict, so documents cross process pools,
        # ``copy.deepcopy`` and caches like every other public value.
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values["fields"] = dict(self.fields)
        return (_document, (values,))


def _document(values: dict[str, object]) -> Document:
    return Document(**values)  # type: ignore[arg-type]


FieldInput = str | int | dt.date | Collection[str | int | dt.date]
"""What ``Document.fields`` maps a field name to: one value or a collection of values."""

MAX_DOCUMENT_FIELDS = 32
"""A document carries values for at most this many fields (the config cap, too)."""


@dataclass(frozen=True, slots=True)
class ArmRanks:
    """A hit's 1-based rank in each arm (``None``: that arm did not return it)."""

    sparse: int | None = None
    dense: int | None = None


@dataclass(frozen=True, slots=True)
class Passage:
    """One search result. Carries no mode and no fallback flag, by design."""

    source_id: str
    title: str
    url: str
    excerpt: str
    language_id: int
    score: float
    ranks: ArmRanks


@dataclass(frozen=True, slots=True)
class SourceText:
    """The full (capped) text of one public source."""

    source_id: str
    title: str
    url: str
    text: str
    language_id: int
    truncated: bool


@dataclass(frozen=True, slots=True)
class GrepMatch:
    """One exact or regex match in a public source's stored text."""

    source_id: str
    title: str
    url: str
    line: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class AddResult:
    """What one ``add`` call did. ``added + updated`` is every document stored.

    ``added``: ids that were new. ``updated``: ids already stored (replaced, even when
    nothing changed). ``unchanged``: of the updated, those whose title and text were
    already stored with a vector, so the vector was re-used without a model call (always
    0 in a keyword-only corpus). ``degraded``: stored without a vector (the embedder was
    down or failed), keyword-searchable until repaired.
    """

    added: int
    updated: int
    unchanged: int
    degraded: int


def is_utf8_encodable(value: str) -> bool:
    """False for strings with lone surrogates (``"\\ud800"``): SQLite cannot store them."""
    if value.isascii():  # the common case, checked at C speed without a copy
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _has_control_chars(value: str) -> bool:
    """A character below U+0020 other than tab, newline and carriage return."""
    return _CONTROL_CHARS.search(value) is not None


def validate_document(doc: object) -> Document:
    """Check one document against the documented caps; raise ``InvalidArgument`` naming
    the offending field. Nothing is stored when any document of a batch fails."""
    if not isinstance(doc, Document):
        raise InvalidArgument(f"expected engine.Document, got {type(doc).__name__}")
    if not is_valid_source_id(doc.id):
        raise InvalidArgument(f"document id must be {SOURCE_ID_RULE}")
    for name, value, cap in (
        ("title", doc.title, MAX_TITLE_CHARS),
        ("text", doc.text, MAX_DOCUMENT_CHARS),
        ("url", doc.url, MAX_URL_CHARS),
    ):
        if not isinstance(value, str):
            raise InvalidArgument(f"document {doc.id}: {name} must be a string")
        if len(value) > cap:
            raise InvalidArgument(
                f"document {doc.id}: {name} has {len(value)} characters; the cap is {cap}"
            )
        if "\x00" in value:
            raise InvalidArgument(f"document {doc.id}: {name} contains a NUL character")
        if not is_utf8_encodable(value):
            raise InvalidArgument(f"document {doc.id}: {name} contains a lone surrogate")
    if _has_control_chars(doc.url):
        raise InvalidArgument(f"document {doc.id}: url contains control characters")
    if (
        isinstance(doc.language_id, bool)
        or not isinstance(doc.language_id, int)
        or not 0 <= doc.language_id <= MAX_LANGUAGE_ID
    ):
        raise InvalidArgument(
            f"document {doc.id}: language_id must be an integer in 0..{MAX_LANGUAGE_ID}"
        )
    groups = doc.access_groups
    if not isinstance(groups, frozenset | set | tuple | list):
        raise InvalidArgument(f"document {doc.id}: access_groups must be a set of strings")
    if len(groups) > MAX_ACCESS_GROUPS or not all(
        isinstance(g, str) and 0 < len(g) <= 128 and not _has_control_chars(g) for g in groups
    ):
        raise InvalidArgument(
            f"document {doc.id}: access_groups must be at most {MAX_ACCESS_GROUPS} "
            "non-empty strings of at most 128 characters"
        )
    if doc.page_uid is not None and (
        isinstance(doc.page_uid, bool)
        or not isinstance(doc.page_uid, int)
        or not -(2**63) <= doc.page_uid < 2**63
    ):
        raise InvalidArgument(f"document {doc.id}: page_uid must be a 64-bit integer or None")
    fields = doc.fields
    if not isinstance(fields, Mapping):
        raise InvalidArgument(f"document {doc.id}: fields must be a mapping of name to value")
    if len(fields) > MAX_DOCUMENT_FIELDS or not all(isinstance(k, str) for k in fields):
        raise InvalidArgument(
            f"document {doc.id}: fields must map at most {MAX_DOCUMENT_FIELDS} string names "
            "to values"
        )
    if isinstance(groups, frozenset) and isinstance(fields, MappingProxyType):
        return doc
    return _normalised(doc)


def _normalised(doc: Document) -> Document:
    """A copy with frozen access groups and a read-only copy of the caller's fields."""
    from dataclasses import replace

    return replace(
        doc,
        access_groups=frozenset(doc.access_groups),
        fields=MappingProxyType(dict(doc.fields)),
    )


def is_finite_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
