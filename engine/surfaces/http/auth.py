"""Who may write: the holder of the server's bearer token, and nobody when there is none.

Reads are public (they only ever see public documents). Every write route is a
``WriteRoute``: it checks ``Authorization: Bearer <token>`` *before* the body is read or
validated, so an unauthenticated upload costs nothing and learns nothing. The token is
compared in constant time (``hmac.compare_digest``). With no token configured, writes
are refused with 403 — never open.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer

from engine.surfaces.http.errors import ApiError

__all__ = ["BEARER", "WriteRoute", "check_writer"]

BEARER = HTTPBearer(auto_error=False, description="The server's API token (writes only).")
"""Declares the scheme in the OpenAPI document; the check itself is ``check_writer``."""

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="tandem"'}


def check_writer(request: Request) -> None:
    """Raise 403 when the server takes no writes, 401 without the right bearer token."""
    token: str | None = request.app.state.token
    if token is None:
        raise ApiError(
            403,
            "writes_disabled",
            "this server takes no writes: it was started without an API token "
            "(tandem serve --token-file PATH, or TANDEM_API_TOKEN)",
        )
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise ApiError(
            401, "unauthorized", "this write needs Authorization: Bearer <token>", _CHALLENGE
        )
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise ApiError(401, "unauthorized", "the bearer token is not valid", _CHALLENGE)


class WriteRoute(APIRoute):
    """An API route that admits only the token holder, checked before the body is read."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            check_writer(request)
            return await handler(request)

        return guarded
