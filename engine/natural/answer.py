"""What ``Corpus.ask`` returns: the passages and how the question was understood."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.documents import Passage
from engine.filters import Filter, Range, filter_to_json


@dataclass(frozen=True, slots=True)
class ExtractedValue:
    """A value the model extracted for a keyword field, and what it resolved to.

    ``resolved`` holds the stored values it matched (case-insensitively, or as the only
    stored value containing it); empty means unresolved: the value was searched as
    keyword text instead of applied as a filter.
    """

    field: str
    extracted: str
    resolved: tuple[str, ...] = ()

    @property
    def applied(self) -> bool:
        return bool(self.resolved)


@dataclass(frozen=True, slots=True)
class Interpretation:
    """How a question was understood, so a UI can show each part and let the user remove it.

    ``keywords``: what the model extracted as search words. ``query``: the text actually
    searched (keywords plus unresolved values; empty when only filters applied).
    ``values``: extracted keyword-field values and their resolution. ``ranges``: integer
    and date ranges applied. ``filters``: everything applied, as one filter expression —
    pass it (or an edited copy) to ``Corpus.search(query, filters=...)``.
    """

    keywords: tuple[str, ...]
    query: str
    values: tuple[ExtractedValue, ...]
    ranges: tuple[Range, ...]
    filters: Filter | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able form (for the CLI and MCP)."""
        return {
            "keywords": list(self.keywords),
            "query": self.query,
            "values": [
                {"field": v.field, "extracted": v.extracted, "resolved": list(v.resolved)}
                for v in self.values
            ],
            "filters": filter_to_json(self.filters),
        }


@dataclass(frozen=True, slots=True)
class Answer:
    """The passages found for a question, and the interpretation that found them."""

    passages: tuple[Passage, ...]
    interpretation: Interpretation
