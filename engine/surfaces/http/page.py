"""The search page for people at ``/`` and the API docs at ``/docs``, all served locally.

The page is three files shipped in the package (``static/``): no CDN, no build step. It
is served with a strict Content-Security-Policy (scripts and styles from this server
only, no inline code, no framing), so even a bug that let document text become markup
could not run a script (``X-Content-Type-Options: nosniff``, which every answer of the
server carries, is set in one place: ``ops.RequestGuard``). ``/docs`` is Swagger UI from
the ``fastapi-offline`` package's bundled copy, so it works without a network too.
"""

from __future__ import annotations

import importlib.resources
from functools import cache
from pathlib import Path

from fastapi import APIRouter
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

from engine.surfaces.http.errors import ApiError

__all__ = ["router"]

_STATIC = importlib.resources.files("engine.surfaces.http") / "static"
_PAGE_FILES = {
    "search.css": "text/css; charset=utf-8",
    "search.js": "text/javascript; charset=utf-8",
}
_SECURITY = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
_DOCS_SECURITY = {
    **_SECURITY,
    # Swagger UI runs an inline script (and, without fastapi-offline, scripts from its
    # CDN), so only framing, plugins and <base> are ruled out: a page that can send the
    # API's writes must not be framed by another site.
    "Content-Security-Policy": "frame-ancestors 'none'; object-src 'none'; base-uri 'none'",
}
_DOCS_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon.png": "image/png",
}

router = APIRouter(include_in_schema=False)


@cache
def _asset(name: str) -> bytes:
    return (_STATIC / name).read_bytes()


@cache
def _docs_dir() -> Path | None:
    try:
        import fastapi_offline
    except ImportError:
        return None
    return Path(fastapi_offline.__file__).parent / "static"


@router.api_route("/", methods=["GET", "HEAD"])
async def page() -> HTMLResponse:
    return HTMLResponse(_asset("index.html"), headers=_SECURITY)


@router.get("/static/{name}")
async def page_asset(name: str) -> Response:
    if name not in _PAGE_FILES:
        raise ApiError(404, "not_found", "no such file")
    headers = {**_SECURITY, "Cache-Control": "no-cache"}
    return Response(_asset(name), media_type=_PAGE_FILES[name], headers=headers)


@router.get("/docs")
async def docs() -> HTMLResponse:
    if _docs_dir() is None:  # fastapi-offline missing: Swagger UI from its CDN
        html = get_swagger_ui_html(openapi_url="/openapi.json", title="Tandem API")
    else:
        html = get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="Tandem API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon.png",
        )
    html.headers.update(_DOCS_SECURITY)
    return html


@cache
def _docs_asset(name: str) -> bytes:
    directory = _docs_dir()
    assert directory is not None
    return (directory / name).read_bytes()


@router.get("/docs/assets/{name}")
async def docs_asset(name: str) -> Response:
    if _docs_dir() is None or name not in _DOCS_ASSETS:
        raise ApiError(404, "not_found", "no such file")
    return Response(
        _docs_asset(name),
        media_type=_DOCS_ASSETS[name],
        headers={**_DOCS_SECURITY, "Cache-Control": "max-age=86400"},
    )
