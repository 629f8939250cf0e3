"""Request and response bodies of the ``/v1`` API (frozen pydantic models).

Requests refuse unknown fields, with one exception: ``mode``. Old clients still send it;
it is dropped before validation, so such a request is answered exactly as without it —
never a 400, never echoed, and absent from the schema. Numbers a person types (``top_k``,
``offset``, ``language_id``, ``limit``) are any integer: the engine clamps them as
``Corpus.search`` documents, so an out-of-range value is never an error; a boolean is not
one (``engine.surfaces.json_args``). The query text
is capped only by the body size (the engine reads its first ``MAX_QUERY_LENGTH``, 4,096,
characters).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engine import FieldType, GrepMatch, Passage, SourceText
from engine.config import DEFAULT_MODEL
from engine.limits import CORPUS_NAME_PATTERN, MAX_GREP_PATTERN, MAX_OFFSET, MAX_TITLE_CHARS
from engine.surfaces.json_args import Count, Flag
from engine.surfaces.loaders import DOCUMENT_KEYS
from engine.surfaces.memory import MAX_MEMORY_CHARS, Recalled
from sparse import DEFAULT_TITLE_WEIGHT, MAX_QUERY_LENGTH, MAX_TITLE_WEIGHT, Analyzer

__all__ = [
    "AskRequest",
    "CreateCorpusRequest",
    "EvidenceRequest",
    "GrepRequest",
    "RecallRequest",
    "RememberRequest",
    "SearchRequest",
    "error_responses",
    "grep_body",
    "passage_body",
    "recalled_body",
    "source_body",
]

FilterJson = Annotated[
    dict[str, Any] | list[dict[str, Any]] | None,
    Field(
        description=(
            "Only documents whose declared fields match: field name to a value (equality), "
            'a list (any of), or operators eq, in, gt, gte, lt, lte — e.g. {"author": '
            '"Walter", "year": {"gte": 1942}}. A list of such objects is AND-ed.'
        ),
        examples=[{"year": {"gte": 1942}}],
    ),
]


class _Request(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _drop_legacy_mode(cls, data: Any) -> Any:
        if isinstance(data, dict) and "mode" in data:
            return {k: v for k, v in data.items() if k != "mode"}
        return data


class SearchRequest(_Request):
    query: str = Field(
        description=f"What to look for (trimmed; the first {MAX_QUERY_LENGTH:,} characters)."
    )
    top_k: Count = Field(10, description="How many passages; clamped to 1..200.")
    offset: Count = Field(
        0,
        description=(
            f"Skip this many (paging); a negative offset is 0, past {MAX_OFFSET:,} the page "
            "is empty."
        ),
    )
    language_id: Count | None = Field(None, description="Only this language (negative: 0).")
    filters: FilterJson = None


class EvidenceRequest(_Request):
    query: str
    top_k: Count = Field(5, description="How many sources; clamped to 1..200.")


class GrepRequest(_Request):
    pattern: str = Field(
        max_length=MAX_GREP_PATTERN,
        description="A regular expression (or text, with fixed).",
    )
    limit: Count = Field(20, description="At most this many matches; clamped to 1..200.")
    fixed: Flag = Field(False, description="The pattern is plain text.")


class AskRequest(_Request):
    question: str = Field(description="A question in plain language (≤ 500 characters).")
    top_k: Count = 10
    language_id: Count | None = None


class CreateCorpusRequest(_Request):
    name: str = Field(pattern=f"^{CORPUS_NAME_PATTERN.pattern}$", max_length=64)
    embedder: str | None = Field(
        DEFAULT_MODEL,
        min_length=1,
        max_length=512,
        description="A sentence-transformers model name; null makes a keyword-only corpus.",
    )
    fields: dict[str, FieldType] = Field(
        default_factory=dict,
        description='Filterable fields, e.g. {"year": "integer"}; not named like a '
        "document key (" + ", ".join(sorted(DOCUMENT_KEYS)) + ").",
    )
    fusion: Literal["rrf", "zscore"] = Field(
        "rrf",
        description="How a hybrid search merges its arms: reciprocal rank fusion (default) "
        "or z-scored arm scores.",
    )
    title_weight: Count = Field(
        DEFAULT_TITLE_WEIGHT,
        ge=1,
        le=MAX_TITLE_WEIGHT,
        description="How many times the keyword index counts a title ahead of the body.",
    )
    languages: dict[Count, str] = Field(
        default_factory=dict,
        max_length=64,
        description='Keyword analyzer per language id, e.g. {"1": "fr", "2": "de"}: one of '
        + ", ".join(a.value for a in Analyzer)
        + ". Id 0 is English unless named; an unnamed id gets the CJK fallback.",
    )

    @field_validator("fields")
    @classmethod
    def _fields_not_document_keys(cls, fields: dict[str, FieldType]) -> dict[str, FieldType]:
        # An upload's top-level "title" is the document's title: a field of that name
        # could only be filled from a "fields" object, so its values would be lost.
        for name in fields:
            if name in DOCUMENT_KEYS:
                raise ValueError(
                    f"{name!r} is a document key in the documents this server takes; name "
                    f"the field otherwise (e.g. doc_{name})"
                )
        return fields


class RememberRequest(_Request):
    text: str = Field(min_length=1, max_length=MAX_MEMORY_CHARS)
    scope: str = Field(min_length=1, max_length=256, description="Whose or which task's memory.")
    title: str = Field("", max_length=MAX_TITLE_CHARS)
    id: str | None = Field(None, description="Default: derived from scope and text.")


class RecallRequest(_Request):
    query: str
    scope: str | None = Field(None, min_length=1, max_length=256)
    top_k: Count = Field(5, description="Clamped to 1..200.")


# -- responses (plain dicts: the passages are the engine's frozen dataclasses) --------------


def passage_body(rank: int, p: Passage) -> dict[str, Any]:
    return {
        "rank": rank,
        "source_id": p.source_id,
        "title": p.title,
        "url": p.url,
        "excerpt": p.excerpt,
        "language_id": p.language_id,
        "score": p.score,
        "ranks": {"sparse": p.ranks.sparse, "dense": p.ranks.dense},
    }


def source_body(s: SourceText) -> dict[str, Any]:
    return {
        "source_id": s.source_id,
        "title": s.title,
        "url": s.url,
        "text": s.text,
        "language_id": s.language_id,
        "truncated": s.truncated,
    }


def grep_body(m: GrepMatch) -> dict[str, Any]:
    return {
        "source_id": m.source_id,
        "title": m.title,
        "url": m.url,
        "line": m.line,
        "start": m.start,
        "end": m.end,
    }


def recalled_body(m: Recalled) -> dict[str, Any]:
    return {"id": m.id, "title": m.title, "text": m.text, "score": m.score}


# -- response models (they document the answers in the OpenAPI schema) ----------------------


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class RanksOut(_Out):
    sparse: int | None = Field(description="1-based rank in the keyword arm, or null.")
    dense: int | None = Field(description="1-based rank in the vector arm, or null.")


class PassageOut(_Out):
    rank: int
    source_id: str
    title: str
    url: str
    excerpt: str
    language_id: int
    score: float
    ranks: RanksOut


class SearchResponse(_Out):
    passages: list[PassageOut]


class EvidenceResponse(_Out):
    evidence: str = Field(description="[n] source_id · title · url, then the excerpt; per source.")


class SourceResponse(_Out):
    source_id: str
    title: str
    url: str
    text: str
    language_id: int
    truncated: bool


class MatchOut(_Out):
    source_id: str
    title: str
    url: str
    line: str
    start: int
    end: int


class GrepResponse(_Out):
    matches: list[MatchOut]


class AskResponse(_Out):
    interpretation: dict[str, Any]
    passages: list[PassageOut]


class CorporaResponse(_Out):
    corpora: list[str]


class CorpusResponse(_Out):
    name: str
    embedder: str | None
    fields: dict[str, FieldType]
    fusion: Literal["rrf", "zscore"]
    title_weight: int
    languages: dict[int, str] = Field(
        description="The keyword analyzer of each language id named at creation, e.g. "
        '{"1": "fr"} (ids as JSON object keys); empty when none was named.'
    )


class RejectedOut(_Out):
    line: int = Field(description="NDJSON line number, or 1-based position in a JSON array.")
    reason: str


class UploadResponse(_Out):
    added: int
    updated: int
    unchanged: int
    degraded: int
    rejected: list[RejectedOut]
    rejected_total: int


class DeletedResponse(_Out):
    deleted: int


class DroppedResponse(_Out):
    dropped: str


class RememberResponse(_Out):
    id: str
    scope: str
    added: bool


class MemoryOut(_Out):
    id: str
    title: str
    text: str
    score: float


class RecallResponse(_Out):
    memories: list[MemoryOut]


class ErrorDetail(_Out):
    code: str
    message: str


class ErrorResponse(_Out):
    error: ErrorDetail


_UNPROCESSABLE = (
    "The request cannot be answered as sent. error.code is invalid_json (the body is not "
    "valid JSON), invalid_request (the body or path is not what this route takes), "
    "invalid_argument (the engine refused a value; the message names it) or, for grep, "
    "grep_timeout."
)


def error_responses(*statuses: int) -> dict[int | str, dict[str, object]]:
    """OpenAPI ``responses`` for these error statuses, each in the one error shape."""
    responses: dict[int | str, dict[str, object]] = {}
    for status in statuses:
        responses[status] = {"model": ErrorResponse}
        if status == 422:
            responses[status]["description"] = _UNPROCESSABLE
    return responses
