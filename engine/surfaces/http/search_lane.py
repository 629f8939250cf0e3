"""The search route's fast lane: ``POST /v1/corpora/{name}/search`` without FastAPI's routing.

A keyword search takes ~2 ms; on the benchmark machine (2 cores at 2.0 GHz) FastAPI's
routing, dependency solving and body handling took ~0.3 ms of CPU on top of it for the
simplest route — a third of the 1 ms this API allows itself over an in-process call.
``SearchLane`` is a pure ASGI middleware (inside the body cap and the request guard)
that answers a well-formed search itself: the same ``SearchRequest`` model validates the
body, ``search_passages`` builds the same answer the declared route builds, engine errors
go through the one mapping (``errors.engine_error``) and a search runs in place or on a
worker thread by the same rule (``routes_read.run_search``).

Everything else passes to the app unchanged, with the body replayed: another route,
another content type, a body that is not JSON or that the model refuses (FastAPI then
writes the one 422 shape), a body with a run of 20 or more digits or of 19 after a
minus — orjson reads an integer outside −2⁶³ .. 2⁶⁴ − 1 as a float where the route's
``json`` keeps it an int, so the two would answer it differently — and a body with more
than ``MAX_LANE_BRACKETS`` brackets, which no search needs: orjson before 3.10 parses
nesting by recursion without a limit (200,000 levels overflowed the stack and killed the
server), and the route's parser refuses deep nesting with its 422. The declared FastAPI
route stays the contract — it is what ``/openapi.json`` documents and what answers every
request the lane passes on; tests compare the two answers for the same requests.
"""

from __future__ import annotations

import re

import orjson
from pydantic import ValidationError
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine import EngineError
from engine.limits import CORPUS_NAME_PATTERN
from engine.surfaces.http.errors import ApiError, engine_error, error_body
from engine.surfaces.http.ops import ROUTE_KEY
from engine.surfaces.http.responses import send_json
from engine.surfaces.http.routes_read import run_search
from engine.surfaces.http.schemas import SearchRequest

__all__ = ["SEARCH_ROUTE", "SearchLane"]

SEARCH_ROUTE = "/v1/corpora/{name}/search"
_SEARCH_PATH = re.compile(rf"^/v1/corpora/({CORPUS_NAME_PATTERN.pattern})/search$")
# 2**64 has 20 digits, -2**63 - 1 has 19 after its minus. The run may sit in a string or
# a float: the route answers those the same, only a little slower.
_MAYBE_PAST_64_BITS = re.compile(rb"-\d{19}|\d{20}")
# Opening brackets (in strings too: those bodies just take the route). A search body with
# the most a filter may hold (32 conditions, lists 32 deep) has a few hundred.
MAX_LANE_BRACKETS = 1_000


def _is_json(scope: Scope) -> bool:
    for key, value in scope["headers"]:
        if key == b"content-type":
            return bool(value.split(b";", 1)[0].strip().lower() == b"application/json")
    return False


class SearchLane:
    """Answers valid search requests directly; hands every other request to ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = (
            _SEARCH_PATH.match(scope["path"])
            if scope["type"] == "http" and scope["method"] == "POST" and _is_json(scope)
            else None
        )
        if match is None:
            await self.app(scope, receive, send)
            return
        scope[ROUTE_KEY] = SEARCH_ROUTE  # the request guard's label, as for FastAPI's routes
        try:
            body = await _read_body(receive)
        except ApiError as refused:  # the body cap stopped it
            await _send_error(send, refused)
            return
        request = _parse(body)
        if request is None:  # FastAPI writes the refusal, in the API's one shape
            await self.app(scope, _replay(body, receive), send)
            return
        try:
            passages = await run_search(scope["app"], match.group(1), request)
        except EngineError as exc:
            await _send_error(send, engine_error(exc))
            return
        except ApiError as exc:  # not ready, out of time
            await _send_error(send, exc)
            return
        await send_json(send, 200, {"passages": passages})


def _parse(body: bytes) -> SearchRequest | None:
    if _MAYBE_PAST_64_BITS.search(body):
        return None
    if body.count(b"[") + body.count(b"{") > MAX_LANE_BRACKETS:
        return None
    try:
        return SearchRequest.model_validate(orjson.loads(body))
    except (orjson.JSONDecodeError, ValidationError):
        return None


async def _send_error(send: Send, exc: ApiError) -> None:
    await send_json(send, exc.status_code, error_body(exc.code, exc.message), exc.headers)


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            # The client went away before its body was whole: what arrived may still
            # parse (a search of half a query, for nobody). The guard counts it as gone.
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
