"""Every error the API answers, in one JSON shape: ``{"error": {"code", "message"}}``.

The engine's exception hierarchy is mapped to a status and a code here and nowhere else
(``engine_error``). Messages are the engine's own sentences (they name the field, the cap,
the corpus); request validation errors list what is wrong where, without echoing the
input back. A body that is not JSON gets one answer on every route, whoever parsed it
(``invalid_json``). Unexpected exceptions become a 500 with a fixed message and no traceback
(``ops.RequestGuard``); log lines name exception types only, never query or document text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException

from engine import (
    CorpusExists,
    CorpusNotFound,
    EngineError,
    EngineLocked,
    EngineReadOnly,
    GrepTimeout,
    InvalidArgument,
    NaturalSearchUnavailable,
    RateLimited,
    SourceNotFound,
    StorageError,
)
from engine.surfaces.http.responses import JsonAnswer
from engine.surfaces.loaders import json_failure

__all__ = ["ApiError", "engine_error", "error_body", "install_error_handlers", "invalid_json"]

logger = logging.getLogger(__name__)

_MAX_MESSAGE_CHARS = 1_000


class ApiError(HTTPException):
    """An answer other than success, with a stable machine-readable ``code``.

    An ``HTTPException`` so that FastAPI passes it through untouched even when it is
    raised while a request body is being read (the body caps do that). ``extra`` members
    go beside ``error`` in the body (an upload stopped part-way says what it stored).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Mapping[str, str] | None = None,
        *,
        extra: Mapping[str, object] | None = None,
    ) -> None:
        super().__init__(status_code=status, detail=message, headers=dict(headers or {}))
        self.code = code
        self.message = message
        self.extra = dict(extra or {})


def invalid_json(exc: ValueError | RecursionError) -> ApiError:
    """The one answer to a body that ``json`` cannot parse, on every route."""
    return ApiError(422, "invalid_json", f"the body is not valid JSON: {json_failure(exc)}")


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message[:_MAX_MESSAGE_CHARS]}}


def _json(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JsonAnswer:
    return JsonAnswer(error_body(code, message), status_code=status, headers=dict(headers or {}))


# Most specific first: SourceNotFound and CorpusNotFound are KeyErrors, InvalidArgument a
# ValueError, GrepTimeout and the natural-language errors plain EngineErrors.
_ENGINE_ERRORS: Sequence[tuple[type[EngineError], int, str]] = (
    (GrepTimeout, 422, "grep_timeout"),
    (InvalidArgument, 422, "invalid_argument"),
    (CorpusNotFound, 404, "corpus_not_found"),
    (SourceNotFound, 404, "source_not_found"),
    (CorpusExists, 409, "corpus_exists"),
    (RateLimited, 429, "rate_limited"),
    (NaturalSearchUnavailable, 503, "questions_unavailable"),
    (EngineLocked, 503, "engine_busy"),  # EngineBusy too: a write waited out busy_timeout
    (EngineReadOnly, 403, "read_only"),
    (StorageError, 507, "storage_error"),
)


def engine_error(exc: EngineError) -> ApiError:
    """The API answer for an engine exception: the one mapping of the whole server."""
    for kind, status, code in _ENGINE_ERRORS:
        if isinstance(exc, kind):
            headers: dict[str, str] = {}
            message = str(exc)
            if isinstance(exc, RateLimited):
                headers["Retry-After"] = str(max(1, round(exc.retry_after_s)))
            elif isinstance(exc, EngineLocked):
                headers["Retry-After"] = "1"
            elif isinstance(exc, SourceNotFound):
                message = "no public source with this id"  # absent and non-public look alike
            elif isinstance(exc, StorageError):
                # Its text names the server's files; the log has it, the client need not.
                logger.warning("storage error answered as 507: %s", exc)
                message = "the server's storage failed (disk full or files unreadable)"
            return ApiError(status, code, message, headers)
    logger.warning("engine error answered as 500: %s", type(exc).__name__)
    return ApiError(500, "engine_error", "the search engine could not complete this request")


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    429: "rate_limited",
}


def _validation_message(errors: Sequence[Any]) -> str:
    parts = []
    for error in errors[:10]:
        loc = ".".join(str(p) for p in error.get("loc", ()) if p not in ("body",)) or "body"
        parts.append(f"{loc}: {error.get('msg', 'invalid')}")
    more = len(errors) - 10
    if more > 0:
        parts.append(f"... and {more} more")
    return "; ".join(parts) or "invalid request"


async def _on_api_error(request: Request, exc: Exception) -> JsonAnswer:
    assert isinstance(exc, ApiError)
    if exc.extra:
        body = exc.extra | error_body(exc.code, exc.message)
        return JsonAnswer(body, status_code=exc.status_code, headers=dict(exc.headers or {}))
    return _json(exc.status_code, exc.code, exc.message, exc.headers)


async def _on_http_error(request: Request, exc: Exception) -> JsonAnswer:
    assert isinstance(exc, HTTPException)
    cause = exc.__cause__
    if exc.status_code == 400 and isinstance(cause, ValueError | RecursionError):
        # FastAPI answers a body that ``json.loads`` refuses with anything but a
        # JSONDecodeError (not UTF-8, nested too deep, an over-long integer) with a bare
        # 400 raised from the parse error; answer it like every other unparseable body.
        return await _on_api_error(request, invalid_json(cause))
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    if exc.status_code == 404:
        message = "no such endpoint (the API lives under /v1; see /docs)"
    return _json(exc.status_code, code, message, exc.headers)


async def _on_validation_error(request: Request, exc: Exception) -> JsonAnswer:
    assert isinstance(exc, RequestValidationError)
    if isinstance(exc.__cause__, json.JSONDecodeError):  # FastAPI could not parse the body
        return await _on_api_error(request, invalid_json(exc.__cause__))
    if _body_left_unparsed(exc.errors()):
        # FastAPI parses a body as JSON only when its Content-Type says JSON (recent
        # versions: also not when none is given); otherwise the route's model met raw
        # bytes and the shape error pointed nowhere near the cause (``curl -d`` sends a
        # form's type, ``requests.post(data=...)`` none).
        media = _declared_media_type(request)
        given = "none given" if media is None else f"got {media[:_SHOWN_MEDIA_CHARS]!r}"
        return _json(
            415,
            "unsupported_media_type",
            f"send the body as JSON, with Content-Type: application/json ({given})",
        )
    return _json(422, "invalid_request", _validation_message(exc.errors()))


_SHOWN_MEDIA_CHARS = 60


def _declared_media_type(request: Request) -> str | None:
    value = request.headers.get("content-type")
    return None if value is None else value.split(";", 1)[0].strip().lower()


def _body_left_unparsed(errors: Sequence[Any]) -> bool:
    return any(
        isinstance(e, Mapping)
        and tuple(e.get("loc", ()))[:1] == ("body",)
        and isinstance(e.get("input"), bytes | bytearray)
        for e in errors
    )


async def _on_engine_error(request: Request, exc: Exception) -> JsonAnswer:
    assert isinstance(exc, EngineError)
    mapped = engine_error(exc)
    return _json(mapped.status_code, mapped.code, mapped.message, mapped.headers)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _on_api_error)
    app.add_exception_handler(HTTPException, _on_http_error)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(EngineError, _on_engine_error)
    # Anything else that escapes becomes a 500 in ``ops.RequestGuard``.
