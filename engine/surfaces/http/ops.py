"""Operations: ``/metrics``, ``/healthz``, ``/readyz``, and the request metrics behind them.

``/metrics`` is the engine's own registry (searches by strategy, fallbacks, latency,
degraded documents, ...) plus this server's request counters, so it counts exactly the
searches this server answered. With several workers, each process writes its values to
prometheus_client's multiprocess directory and a scrape sums them (the library's
multiprocess mode); the corpus-state gauges are re-read by the answering worker first.

``RequestGuard`` (pure ASGI, outermost) counts requests by route template, method and
status — never by path, which can carry text a caller typed — and turns any exception
that escaped the app into a 500 in the API's error shape, logging its type only. It is
also the one place that sets the headers every answer carries, whoever wrote it (a
route, the search lane, the body cap, the guard itself): ``X-Content-Type-Options:
nosniff`` on all, and ``Cache-Control: no-store`` on ``/v1`` answers — a search's answer
depends on access and changes with every write, so no browser or proxy may keep one —
and on ``/metrics``, ``/healthz`` and ``/readyz``, whose answers are the state of now.
A header the answer set itself is kept.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine import SearchEngine
from engine.surfaces.http.errors import error_body
from engine.surfaces.http.responses import JsonAnswer
from engine.surfaces.metrics_http import CONTENT_TYPE

__all__ = ["ROUTE_KEY", "RequestGuard", "RequestMetrics", "router", "scrape"]

ROUTE_KEY = "tandem.route"
"""Scope key naming the route template of a request answered outside FastAPI's router."""

logger = logging.getLogger(__name__)

_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)


class RequestMetrics:
    """``tandem_http_requests_total`` and ``tandem_http_request_duration_seconds``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "tandem_http_requests",
            "HTTP requests answered, by route template, method and status code.",
            ["route", "method", "status"],
            registry=registry,
        )
        self.duration = Histogram(
            "tandem_http_request_duration_seconds",
            "Wall time from request start to the end of the response, by route template.",
            ["route"],
            buckets=_BUCKETS,
            registry=registry,
        )


_CLIENT_CLOSED = 499
"""Status recorded for a request whose client hung up before it could be answered."""

_EVERY_ANSWER = ((b"x-content-type-options", b"nosniff"),)
_LIVE_ANSWER = (*_EVERY_ANSWER, (b"cache-control", b"no-store"))
_LIVE_OPERATIONS = frozenset({"/metrics", "/healthz", "/readyz"})


def _is_live(path: str) -> bool:
    """An answer no cache may keep: the API's, and the operations' (the state of now)."""
    return path.startswith("/v1/") or path == "/v1" or path in _LIVE_OPERATIONS


def _with_headers(message: Message, added: tuple[tuple[bytes, bytes], ...]) -> Message:
    """``message`` (a response start) with ``added``, less those it sets itself: a copy,
    since the list it carries may be a response object's own."""
    headers = list(message.get("headers", ()))
    present = {name.lower() for name, _ in headers}
    headers += [header for header in added if header[0] not in present]
    return {**message, "headers": headers}


class RequestGuard:
    """Counts every request and answers 500 (error shape) for anything that escaped."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]
        started = [False]
        added = _LIVE_ANSWER if _is_live(scope["path"]) else _EVERY_ANSWER

        hung_up = [False]

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
                started[0] = True
                message = _with_headers(message, added)
            await send(message)

        async def watched() -> Message:
            message = await receive()
            if message["type"] == "http.disconnect":
                hung_up[0] = True
            return message

        try:
            await self.app(scope, watched, tracked)
        except ClientDisconnect:
            # The client hung up before its body arrived (nothing was written: uploads
            # are spooled whole first). Not a server error: counted as nginx's 499.
            logger.debug("client closed the connection before its request body arrived")
            if not started[0]:
                status[0] = _CLIENT_CLOSED
        except asyncio.CancelledError:
            # The server is stopping and its graceful shutdown ran out with this request
            # still reading its body or answering (a slow upload, a long ``ask``): uvicorn
            # cancels it. Answered in the one error shape, rather than uvicorn's bare text
            # 500 and an "Exception in ASGI application" traceback in the log — and the
            # request ends here (the guard is the app's outermost layer: nothing outside
            # it waits for this cancellation but the server that asked for it).
            logger.warning("a request was cut off by the server's shutdown")
            if not started[0]:
                await _error_answer(
                    tracked, send, 503, "shutting_down", "the server is shutting down"
                )
        except Exception as exc:  # the last line of defence: never a traceback page
            logger.error("unhandled %s while answering a request", type(exc).__name__)
            if not started[0]:
                await _error_answer(
                    tracked, send, 500, "internal_error", "the server failed to answer this request"
                )
        finally:
            if hung_up[0] and status[0] == 400:
                # FastAPI answers a body cut short by a hang-up with a 400 of its own (to
                # nobody): the client is gone, counted as such.
                status[0] = _CLIENT_CLOSED
            metrics: RequestMetrics | None = getattr(scope["app"].state, "request_metrics", None)
            if metrics is not None:
                route = getattr(scope.get("route"), "path", None) or scope.get(ROUTE_KEY)
                route = route or "unmatched"
                metrics.requests.labels(route, scope.get("method", ""), str(status[0])).inc()
                metrics.duration.labels(route).observe(time.perf_counter() - start)


async def _error_answer(tracked: Send, send: Send, status: int, code: str, message: str) -> None:
    """A whole JSON error answer (its start through ``tracked``: counted, headers added)."""
    body = json.dumps(error_body(code, message)).encode()
    headers = [(b"content-type", b"application/json")]
    if status == 503:
        headers.append((b"connection", b"close"))
    await tracked({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def scrape(engine: SearchEngine, *, multiprocess: bool) -> bytes:
    """The Prometheus text for this server (every worker's values in multiprocess mode)."""
    live = engine.list_corpora()
    # Refreshes the corpus-state gauges, opening every corpus of the directory first (one
    # created since by another process too, before anyone searches it).
    own = generate_latest(engine.registry)
    if not multiprocess:
        return own
    from prometheus_client import multiprocess as mp

    registry = CollectorRegistry()
    workers = mp.MultiProcessCollector(None)  # type: ignore[no-untyped-call]
    registry.register(_LiveCorpora(workers, set(live)))
    return generate_latest(registry)


class _LiveCorpora(Collector):
    """The workers' series, less those of corpora that no longer exist: multiprocess
    mode cannot remove a series (each worker's file keeps it), so a dropped corpus's
    gauges and counters would be scraped for ever. (A corpus re-created under the same
    name shows its counters continuing from the dropped one's.)"""

    def __init__(self, inner: Collector, live: set[str]) -> None:
        self._inner = inner
        self._live = live

    def collect(self) -> Iterator[Metric]:
        for metric in self._inner.collect():
            metric.samples = [
                sample
                for sample in metric.samples
                if sample.labels.get("corpus") is None or sample.labels["corpus"] in self._live
            ]
            yield metric


router = APIRouter(tags=["operations"])


@router.get("/metrics", summary="Prometheus metrics (text format)", response_class=Response)
async def metrics(request: Request) -> Response:
    engine: SearchEngine | None = getattr(request.app.state, "engine", None)
    if engine is None:
        return JsonAnswer(error_body("not_ready", "the engine is not open"), status_code=503)
    multiprocess = bool(request.app.state.settings.multiprocess_metrics)
    body = await anyio.to_thread.run_sync(lambda: scrape(engine, multiprocess=multiprocess))
    return Response(body, media_type=CONTENT_TYPE)


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> JsonAnswer:
    return JsonAnswer({"status": "ok"})


@router.get("/readyz", summary="Readiness: the engine directory is open and readable")
async def readyz(request: Request) -> JsonAnswer:
    engine: SearchEngine | None = getattr(request.app.state, "engine", None)
    if engine is None:
        return JsonAnswer(error_body("not_ready", "the engine is not open"), status_code=503)
    try:
        names = await anyio.to_thread.run_sync(engine.list_corpora)
    except Exception as exc:  # any failure to read the directory means "not ready"
        logger.warning("readiness check failed: %s", type(exc).__name__)
        return JsonAnswer(
            error_body("not_ready", "the engine directory cannot be read"), status_code=503
        )
    return JsonAnswer({"status": "ready", "corpora": len(names)})
