"""The writes: create and drop corpora, add and delete documents, remember.

Every route here is a ``WriteRoute`` (bearer token checked before the body is read).
Writes run on a worker thread without a time budget: an add is never abandoned half-way;
the body caps bound how long one can take.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated

import anyio.to_thread
import pydantic
from fastapi import APIRouter, Body, Request, Security

from engine import CorpusConfig, SentenceTransformerEmbedding
from engine.config import names_no_model
from engine.surfaces.bulk import AddStopped, BulkReport, add_all
from engine.surfaces.http.auth import BEARER, WriteRoute
from engine.surfaces.http.errors import ApiError, engine_error
from engine.surfaces.http.in_flight import WritesInFlight
from engine.surfaces.http.responses import JsonAnswer
from engine.surfaces.http.routes_read import CorpusName, engine_of, path_source_id
from engine.surfaces.http.schemas import (
    CorpusResponse,
    CreateCorpusRequest,
    DeletedResponse,
    DroppedResponse,
    ErrorResponse,
    RememberRequest,
    RememberResponse,
    UploadResponse,
    error_responses,
)
from engine.surfaces.http.settings import ServerSettings
from engine.surfaces.http.uploads import is_ndjson, parse_upload, report_body, spool
from engine.surfaces.memory import Memory

__all__ = ["router"]

_ERRORS = error_responses(401, 403, 404, 413, 415, 422, 503)

router = APIRouter(
    prefix="/v1",
    tags=["write"],
    route_class=WriteRoute,
    dependencies=[Security(BEARER)],
    responses=_ERRORS,
)

_DOCUMENT_SCHEMA = {
    "type": "object",
    "required": ["id"],
    "properties": {
        "id": {"type": "string", "maxLength": 256},
        "title": {"type": "string"},
        "text": {"type": "string"},
        "url": {"type": "string"},
        "language_id": {"type": "integer", "minimum": 0},
        "access_groups": {"type": "array", "items": {"type": "string"}},
        "fields": {"type": "object", "description": "Values of the corpus's declared fields."},
    },
}
_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "description": (
            "A JSON array of documents, or NDJSON (one document per line, Content-Type "
            "application/x-ndjson) for large uploads. Documents without access_groups are "
            "public; the others are stored but never returned by a read."
        ),
        "content": {
            "application/json": {"schema": {"type": "array", "items": _DOCUMENT_SCHEMA}},
            "application/x-ndjson": {"schema": {"type": "string"}},
        },
    }
}


def _settings(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings


@router.post(
    "/corpora",
    status_code=201,
    response_model=CorpusResponse,
    summary="Create a corpus (hybrid with a model, keyword-only with embedder null)",
    responses={409: {"model": ErrorResponse}},
)
async def create_corpus(request: Request, body: CreateCorpusRequest) -> JsonAnswer:
    engine = engine_of(request)
    model = body.embedder
    if model is not None and names_no_model(model):
        reason = f"{model!r} names no model; a keyword-only corpus has embedder null"
        raise ApiError(422, "invalid_argument", reason)
    try:
        config = CorpusConfig.model_validate(
            {
                "name": body.name,
                "embedder": None if model is None else SentenceTransformerEmbedding(model=model),
                "fields": body.fields,
                "fusion": body.fusion,  # a shorthand: "rrf" or "zscore" with its defaults
                "title_weight": body.title_weight,
                "languages": body.languages,
            }
        )
    except pydantic.ValidationError as exc:
        reasons = "; ".join(str(e["msg"]) for e in exc.errors())
        raise ApiError(422, "invalid_argument", reasons) from None
    await anyio.to_thread.run_sync(engine.create_corpus, config)
    fields = {k: v.value for k, v in body.fields.items()}
    answer = {
        "name": body.name,
        "embedder": model,
        "fields": fields,
        "fusion": body.fusion,
        "title_weight": body.title_weight,
        "languages": {str(k): v for k, v in config.languages.items()},
    }
    return JsonAnswer(answer, status_code=201)


@router.post(
    "/corpora/{name}/documents",
    response_model=UploadResponse,
    summary="Add or replace documents; each refused document is reported with its reason",
    openapi_extra=_UPLOAD_BODY,
)
async def add_documents(request: Request, name: CorpusName) -> JsonAnswer:
    engine = engine_of(request)
    settings = _settings(request)
    ndjson = is_ndjson(request.headers.get("content-type"))
    corpus = await anyio.to_thread.run_sync(engine.corpus, name)  # 404 before reading the body
    upload = await spool(
        request.stream(),
        ndjson=ndjson,
        max_bytes=settings.max_upload_bytes,
        max_line_bytes=settings.max_line_bytes,
    )
    if upload.size == 0:
        upload.close()
        raise ApiError(422, "invalid_request", "the body is empty; send documents")
    writes: WritesInFlight = request.app.state.writes

    def write() -> BulkReport:
        # Counted, and the spooled body released, by the thread itself: a shutdown may
        # cancel this request while the thread writes (see ``in_flight``).
        with writes.writing():
            try:
                return add_all(corpus, parse_upload(upload, corpus.config.fields))
            except AddStopped as stopped:
                raise _stopped_part_way(stopped) from None
            finally:
                upload.close()

    return JsonAnswer(report_body(await _outliving_cancellation(write)))


def _stopped_part_way(stopped: AddStopped) -> ApiError:
    """The engine error's answer (status, code, headers), saying what was stored: the
    upload's earlier batches are durable, so a client told only "busy" would not know
    that half its documents are in."""
    mapped = engine_error(stopped.error)
    line, last = stopped.next_line, stopped.last_line
    return ApiError(
        mapped.status_code,
        mapped.code,
        f"{mapped.message}; the upload stopped at line {line}: the lines before it were "
        f"stored or rejected (see written), the valid lines of {line}-{last} may have been "
        "stored, none after. "
        "Sending it again is safe (writes are upserts)",
        mapped.headers,
        extra={"written": report_body(stopped.report), "stopped_at_line": line},
    )


@router.delete(
    "/corpora/{name}/documents/{source_id:path}",
    response_model=DeletedResponse,
    summary="Delete one document (deleted: 0 when it did not exist)",
)
async def delete_document(request: Request, name: CorpusName, source_id: str) -> JsonAnswer:
    engine = engine_of(request)
    source_id = path_source_id(request, source_id)
    deleted = await anyio.to_thread.run_sync(lambda: engine.corpus(name).delete([source_id]))
    return JsonAnswer({"deleted": deleted})


@router.delete(
    "/corpora/{name}",
    response_model=DroppedResponse,
    summary="Delete a corpus and everything in it",
)
async def drop_corpus(request: Request, name: CorpusName) -> JsonAnswer:
    engine = engine_of(request)
    await anyio.to_thread.run_sync(engine.drop_corpus, name)
    return JsonAnswer({"dropped": name})


@router.post(
    "/memories",
    status_code=201,
    response_model=RememberResponse,
    summary="Agent memory: store a short note under a scope",
    tags=["memory"],
)
async def remember(request: Request, body: Annotated[RememberRequest, Body()]) -> JsonAnswer:
    engine = engine_of(request)
    memory = Memory(engine, _settings(request).memory_corpus)
    done = await anyio.to_thread.run_sync(
        lambda: memory.remember(body.text, body.scope, title=body.title, id=body.id)
    )
    return JsonAnswer(
        {"id": done.id, "scope": done.scope, "added": done.added},
        status_code=201,
    )


async def _outliving_cancellation(write: Callable[[], BulkReport]) -> BulkReport:
    """Run ``write`` on a thread and wait for its report even if this request is
    cancelled meanwhile. A thread cannot be stopped, and the shutdown that cancels a
    request past uvicorn's grace period waits for it anyway (``in_flight``): the cancel
    only turned the write's real report into a bare text 500, though every document was
    stored. (uvicorn cancels its tasks with ``Task.cancel``, which anyio's shielded
    scopes do not stop, hence ``asyncio.shield``.)"""
    job = asyncio.ensure_future(anyio.to_thread.run_sync(write))
    while True:
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            if job.cancelled():
                raise
