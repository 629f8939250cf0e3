"""The HTTP floor: a no-op ASGI app on the same uvicorn set-up as ``tandem serve``.

It reads the request body and answers ``{"passages": []}`` — no routing, no validation,
no search — on uvicorn with the same loop, parser and socket options (TCP_NODELAY), so
wrk's p50 against it is what one request costs on this machine before any application
code runs: loopback, wake-ups, HTTP parsing, and wrk itself.

``python -m bench.http.floor_app`` binds 127.0.0.1 on a port the OS picks and prints
``serving http://127.0.0.1:PORT/`` like ``tandem serve``.
"""

from __future__ import annotations

import uvicorn
from starlette.types import Receive, Scope, Send

from engine.surfaces.http.serve import listening_socket

_BODY = b'{"passages": []}'


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            pass
        return
    more = True
    while more:
        more = bool((await receive()).get("more_body", False))
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(_BODY))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": _BODY})


def main() -> None:
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", access_log=False, lifespan="off"
    )
    sock = listening_socket(config)
    host, port = sock.getsockname()[:2]
    print(f"serving http://{host}:{port}/", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
