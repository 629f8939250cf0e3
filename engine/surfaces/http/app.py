"""The FastAPI application of ``tandem serve``: one per worker process.

``create_app`` wires the pieces: the engine opened in the lifespan (and closed at
shutdown), the ``/v1`` read and write routers, operations (``/metrics``, ``/healthz``,
``/readyz``), the search page and local API docs, the body caps, the request guard, the
search route's fast lane and the one error mapping. There is no CORS middleware: a
browser page from another origin cannot call this API.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio.to_thread
from fastapi import FastAPI

from engine import EngineError, SearchEngine
from engine.surfaces.http import ops, page, routes_read, routes_write
from engine.surfaces.http.caps import BodyCap
from engine.surfaces.http.errors import install_error_handlers
from engine.surfaces.http.in_flight import WritesInFlight
from engine.surfaces.http.ops import RequestGuard, RequestMetrics
from engine.surfaces.http.search_lane import SearchLane
from engine.surfaces.http.serve import end_with_supervisor
from engine.surfaces.http.settings import ServerSettings, load_token

logger = logging.getLogger(__name__)

_WRITES_GRACE_S = 600.0
"""How long a shutdown waits for uploads being written (an upload is capped at 256 MiB;
at a few thousand documents a second without embedding, minutes with it)."""

__all__ = ["EngineFactory", "app_from_env", "create_app"]

EngineFactory = Callable[[Path], SearchEngine]

API_VERSION = "1"
DESCRIPTION = """\
Hybrid keyword + vector search over the corpora of one engine directory.

Reads (search, evidence, sources, grep, ask, recall) are public and only ever see public
documents. Writes need `Authorization: Bearer <token>`. Every error has the shape
`{"error": {"code": ..., "message": ...}}`. There is no search mode to choose.
"""


def _open_all(engine: SearchEngine) -> None:
    """Open every corpus (publishes its gauges) and load its query model, so /readyz
    answers only once the first search pays neither (each worker loads its own). A corpus
    that cannot be opened (a damaged store or config) is logged and left: the others are
    served, and its requests get its error, as when it breaks while the server runs —
    raised here, it kept the whole server from starting."""
    for name in engine.list_corpora():
        try:
            engine.corpus(name)._warm_up()
        except EngineError as exc:
            logger.error("corpus %r cannot be opened (%s); serving the others", name, exc)


def create_app(settings: ServerSettings, *, engine_factory: EngineFactory | None = None) -> FastAPI:
    """The app serving the engine directory ``settings.home``.

    Raises ``InvalidArgument`` when the configured token is unusable (see ``load_token``).
    ``engine_factory`` (tests) builds the ``SearchEngine``; the default opens the directory
    with the settings' ``query_embed_timeout_s``.
    """
    token = load_token(settings)
    factory: EngineFactory = engine_factory or functools.partial(
        SearchEngine, query_embed_timeout=settings.query_embed_timeout_s
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = await anyio.to_thread.run_sync(factory, settings.home)
        try:
            await anyio.to_thread.run_sync(_open_all, engine)
            app.state.request_metrics = RequestMetrics(engine.registry)
            app.state.engine = engine
            yield
        finally:
            # Uploads being written finish whole before the engine closes under them.
            await anyio.to_thread.run_sync(app.state.writes.wait_idle, _WRITES_GRACE_S)
            app.state.engine = None
            await anyio.to_thread.run_sync(engine.close)

    app = FastAPI(
        title="Tandem",
        version=API_VERSION,
        description=DESCRIPTION,
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        lifespan=lifespan,
        # No redirect from "/x/" to "/x": Starlette builds its target from the request's
        # Host header, an open redirect for whoever controls that (a cache, a proxy).
        redirect_slashes=False,
    )
    app.state.settings = settings
    app.state.token = token
    app.state.engine = None
    app.state.request_metrics = None
    app.state.writes = WritesInFlight()
    install_error_handlers(app)
    app.include_router(routes_read.router)
    app.include_router(routes_write.router)
    app.include_router(ops.router)
    app.include_router(page.router)
    app.add_middleware(SearchLane)
    app.add_middleware(
        BodyCap, default_cap=settings.max_body_bytes, upload_cap=settings.max_upload_bytes
    )
    app.add_middleware(RequestGuard)  # outermost: sees every answer, catches what escaped
    return app


def app_from_env() -> FastAPI:
    """The app for a uvicorn worker process (settings from ``TANDEM_SERVE_SETTINGS``); a
    worker of a multi-worker server stops when its supervisor is gone."""
    app = create_app(ServerSettings.from_env())
    end_with_supervisor()
    return app
