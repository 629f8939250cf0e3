"""The scrape endpoint: ``/metrics`` (Prometheus text format) and ``/healthz`` over HTTP.

A small ``ThreadingHTTPServer`` on a daemon thread, bound to one address (127.0.0.1 by
default; port 0 lets the OS choose). It serves one ``CollectorRegistry`` — the engine's
own — so two engines in one process can each serve their metrics on their own port.

The server never logs request lines (a path could carry text a caller typed), and it
answers only ``GET``/``HEAD`` on the two paths; everything else is 404 or 405.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from engine.errors import InvalidArgument

__all__ = ["MetricsServer", "serve_metrics"]

logger = logging.getLogger(__name__)

HealthCheck = Callable[[], bool]

# The classic text format that ``generate_latest`` writes, under the name every Prometheus
# 2.x server knows (prometheus_client's own "latest" name says version=1.0.0).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    registry: CollectorRegistry
    healthy: HealthCheck

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-answer is routine; never print a traceback."""
        logger.debug("metrics endpoint: a request failed")


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10  # idle keep-alive connections end on their own
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: request lines are never logged."""

    def do_GET(self) -> None:
        self._answer(with_body=True)

    def do_HEAD(self) -> None:
        self._answer(with_body=False)

    def do_POST(self) -> None:
        allow = {"Allow": "GET, HEAD"}
        self._send(405, b"method not allowed\n", "text/plain; charset=utf-8", True, allow)

    do_PUT = do_DELETE = do_PATCH = do_POST

    def _answer(self, *, with_body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(self.server.registry), CONTENT_TYPE, with_body)
        elif path == "/healthz":
            ok = self.server.healthy()
            body = b"ok\n" if ok else b"closed\n"
            self._send(200 if ok else 503, body, "text/plain; charset=utf-8", with_body)
        else:
            self._send(404, b"not found\n", "text/plain; charset=utf-8", with_body)

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str,
        with_body: bool,
        headers: dict[str, str] | None = None,
    ) -> None:
        if self.headers.get("Content-Length") or self.headers.get("Transfer-Encoding"):
            # This endpoint reads no request body: one left on a kept-alive connection
            # would be read as the next request. Answer, then close.
            self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        # The state of now, as on tandem serve: no cache between a prober and us keeps it.
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if with_body:
            self.wfile.write(body)


class MetricsServer:
    """A running metrics endpoint. ``stop()`` closes it (idempotent); also a context manager."""

    def __init__(self, server: _Server, thread: threading.Thread) -> None:
        self._server: _Server | None = server
        self._thread = thread
        host, port = server.server_address[:2]
        self._host = str(host)
        self._port = int(port)
        self._lock = threading.Lock()

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        """The ``/metrics`` URL, e.g. ``http://127.0.0.1:9464/metrics``."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}/metrics"

    @property
    def running(self) -> bool:
        return self._server is not None

    def stop(self) -> None:
        """Stop listening and wait for the serving thread; safe to call twice."""
        with self._lock:
            server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        self._thread.join(timeout=5)
        logger.info("metrics endpoint on port %d stopped", self._port)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"MetricsServer(url={self.url!r}, running={self.running})"


def serve_metrics(
    registry: CollectorRegistry,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    healthy: HealthCheck | None = None,
) -> MetricsServer:
    """Serve ``registry`` at ``http://host:port/metrics`` on a daemon thread.

    ``port=0`` lets the OS pick a free port (read it back from ``.port``). ``healthy``
    decides ``/healthz`` (200 ``ok`` / 503); by default it is always healthy. Raises
    ``InvalidArgument`` (a ``ValueError``) for a bad registry, port or host, and
    ``OSError`` when the address cannot be bound (in use, not this machine's, a host name
    that does not resolve).
    """
    if not isinstance(registry, CollectorRegistry):
        raise InvalidArgument("serve_metrics needs a prometheus_client CollectorRegistry")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65_535:
        raise InvalidArgument(f"port must be an integer in 0..65535, got {port!r}")
    if not isinstance(host, str) or not host:
        raise InvalidArgument("host must be a non-empty string")
    server_class = _Server6 if ":" in host else _Server
    server = server_class((host, port), _Handler)
    server.registry = registry
    server.healthy = healthy if healthy is not None else _always
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},
        name=f"tandem-metrics-{server.server_address[1]}",
        daemon=True,
    )
    try:
        thread.start()
    except RuntimeError:
        with contextlib.suppress(OSError):
            server.server_close()
        raise
    handle = MetricsServer(server, thread)
    logger.info("metrics endpoint listening on port %d", handle.port)
    return handle


def _always() -> bool:
    return True
