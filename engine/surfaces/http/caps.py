"""Caps on what one request may cost: body size and wall time.

``BodyCap`` is a pure ASGI middleware: a declared ``Content-Length`` over the cap is
refused with 413 before the app sees the request; a streamed (chunked) body is counted
as it arrives and stopped with 413 at the first byte over. Document uploads have their
own, larger cap; everything else shares ``max_body_bytes``.

``within_budget`` runs one blocking engine call on a worker thread and answers 503
``time_budget_exceeded`` when it takes longer than the budget. The thread cannot be
killed, so it finishes in the background; reads are the only calls run this way (a write
is never abandoned part-way).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

import anyio
import anyio.to_thread
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.surfaces.http.errors import ApiError, error_body
from engine.surfaces.http.responses import send_json

__all__ = ["BodyCap", "human_bytes", "within_budget"]

T = TypeVar("T")

UPLOAD_PATH = re.compile(r"^/v1/corpora/[^/]+/documents/?$")


def human_bytes(n: int) -> str:
    if n >= 1024 * 1024 and n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} bytes"


def too_large(cap: int, what: str = "request body") -> ApiError:
    return ApiError(
        413, "body_too_large", f"the {what} is larger than {human_bytes(cap)}, the cap here"
    )


class BodyCap:
    """Refuse request bodies over ``default_cap`` bytes (``upload_cap`` for uploads)."""

    def __init__(self, app: ASGIApp, *, default_cap: int, upload_cap: int) -> None:
        self.app = app
        self.default_cap = default_cap
        self.upload_cap = upload_cap

    def cap_for(self, scope: Scope) -> int:
        is_upload = scope.get("method") == "POST" and UPLOAD_PATH.match(scope.get("path", ""))
        return self.upload_cap if is_upload else self.default_cap

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap = self.cap_for(scope)
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            await _refuse(send, too_large(cap))
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > cap:
                    raise too_large(cap)
            return message

        await self.app(scope, counted, send)


async def _refuse(send: Send, error: ApiError) -> None:
    body = error_body(error.code, error.message)
    await send_json(send, error.status_code, body, {"connection": "close"})


async def within_budget(call: Callable[[], T], budget_s: float) -> T:
    """``call()`` on a worker thread, or 503 once ``budget_s`` has passed."""
    with anyio.move_on_after(budget_s):
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    raise ApiError(
        503,
        "time_budget_exceeded",
        f"the request took longer than its time budget of {budget_s:g} s",
        {"Retry-After": "1"},
    )
