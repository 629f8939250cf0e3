"""A STAND-IN for an Ollama server, for tests only. It is not Ollama.

No Ollama server can be installed where the tests run, so the tests start this small
threaded HTTP server on 127.0.0.1 (port 0: the OS picks a free port) and point the real
``ollama`` Python client at it. It speaks just enough of the Ollama REST API:

- ``POST /api/embed``   -> ``{"model", "embeddings": [[...], ...], ...}``; vectors are
  deterministic (SHA-256 of the text, see ``standin_vector``), ``dimension`` configurable.
- ``POST /api/show``    -> model details, or 404 ``{"error": ...}`` for a model not "pulled".
- ``GET  /api/tags``    -> the "pulled" models.
- ``GET  /api/version`` -> ``{"version": ...}``.

Behaviours are switchable at run time (``standin.behaviour = Behaviour.SLOW``): healthy,
slow, HTTP 500, malformed JSON, wrong dimensions, NaN values, empty embeddings, an empty
vector, the wrong number of vectors, unknown model (404). ``stop()`` / ``start()`` on the
same port simulate a server that dies mid-run (connection refused while down, pooled
keep-alive connections cut) and comes back. Requests are counted per endpoint, thread-safe,
so tests can prove there is no retry storm.

Routes live in a dict keyed by ``(method, path)``; ``route()`` adds one (a later issue
adds ``/api/chat`` and ``/api/generate`` this way).
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import math
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

__all__ = [
    "Behaviour",
    "OllamaStandIn",
    "Reply",
    "Request",
    "ollama_standin",
    "standin_vector",
]

DEFAULT_MODEL = "standin-embed"
STANDIN_VERSION = "0.0.0-standin"


class Behaviour(enum.Enum):
    """How the stand-in answers model requests (``/api/embed``, ``/api/show``)."""

    HEALTHY = "healthy"
    SLOW = "slow"  # sleep ``delay_s`` before answering (every endpoint)
    ERROR_500 = "error_500"  # HTTP 500 with an Ollama-style error body (every endpoint)
    MALFORMED_JSON = "malformed_json"  # 200 with a truncated JSON body (model endpoints)
    WRONG_DIMENSION = "wrong_dimension"  # vectors of ``dimension + 1`` (embed)
    NAN_VALUES = "nan_values"  # a NaN in every vector (embed)
    EMPTY_EMBEDDINGS = "empty_embeddings"  # ``"embeddings": []`` (embed)
    EMPTY_VECTOR = "empty_vector"  # every vector is ``[]`` (embed)
    WRONG_COUNT = "wrong_count"  # one vector fewer than inputs (embed)
    UNKNOWN_MODEL = "unknown_model"  # 404, as for a model that was never pulled


@dataclass(frozen=True)
class Request:
    """What a route handler sees."""

    method: str
    path: str
    body: Any  # parsed JSON, or None for an empty body
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """What a route handler answers: a status and a JSON-able payload or raw bytes — or
    a body sent piece by piece (``chunks``, ``length`` bytes in all, ``chunk_delay_s``
    apart), for a server that trickles or floods its answer."""

    status: int
    payload: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    chunks: Iterable[bytes] | None = None
    length: int = 0
    chunk_delay_s: float = 0.0


Handler = Callable[[Request], Reply]


def standin_vector(text: str, dimension: int) -> list[float]:
    """The deterministic, unnormalised vector the stand-in returns for ``text``."""
    values: list[float] = []
    block = 0
    while len(values) < dimension:
        digest = hashlib.sha256(f"{block}:{text}".encode()).digest()
        for (word,) in struct.iter_unpack(">I", digest):
            values.append(word / 2**31 - 1.0)  # in [-1, 1)
        block += 1
    return values[:dimension]


def _not_found(model: object) -> Reply:
    return Reply(404, {"error": f"model {model!r} not found, try pulling it first"})


class OllamaStandIn:
    """A threaded HTTP server that imitates the parts of Ollama the embedder uses."""

    def __init__(
        self,
        *,
        dimension: int = 8,
        models: tuple[str, ...] = (DEFAULT_MODEL,),
        delay_s: float = 1.0,
    ) -> None:
        if dimension < 1:
            raise ValueError(f"dimension must be >= 1, got {dimension}")
        self.dimension = dimension
        self.models = models
        self.delay_s = delay_s
        self.behaviour = Behaviour.HEALTHY
        self._port = 0
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._bodies: dict[str, Any] = {}
        self._headers: dict[str, dict[str, str]] = {}
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self.hung_up = threading.Event()  # a client closed while a chunked body was sent
        self.streamed_bytes = 0  # of the last chunked body, written before it ended
        self.routes: dict[tuple[str, str], Handler] = {
            ("POST", "/api/embed"): self._embed,
            ("POST", "/api/show"): self._show,
            ("GET", "/api/tags"): self._tags,
            ("GET", "/api/version"): self._version,
        }

    # -- lifecycle ------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def host(self) -> str:
        """The base URL to give ``ollama.Client(host=...)``."""
        return f"http://127.0.0.1:{self._port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        """Listen (again) — on the same port after a ``stop()``."""
        if self._server is not None:
            return
        self._stopping.clear()
        server = _Server(("127.0.0.1", self._port), _RequestHandler)
        server.standin = self
        self._port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Die: stop listening, wake sleeping handlers and cut open connections."""
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OllamaStandIn:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- observation ------------------------------------------------------------------

    def count(self, path: str | None = None) -> int:
        """Requests received on ``path`` (all paths when None)."""
        with self._lock:
            return self._counts[path] if path else sum(self._counts.values())

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def reset_counts(self) -> None:
        with self._lock:
            self._counts.clear()

    def last_body(self, path: str) -> Any:
        with self._lock:
            return self._bodies.get(path)

    def last_headers(self, path: str) -> dict[str, str]:
        """The last request's headers on ``path`` (names as the client sent them)."""
        with self._lock:
            return dict(self._headers.get(path, {}))

    def route(self, method: str, path: str, handler: Handler) -> None:
        """Add or replace an endpoint."""
        self.routes[(method.upper(), path)] = handler

    # -- dispatch (called from handler threads) ---------------------------------------

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _dispatch(self, request: Request) -> Reply:
        with self._lock:
            self._counts[request.path] += 1
            self._bodies[request.path] = request.body
            self._headers[request.path] = request.headers
        handler = self.routes.get((request.method, request.path))
        if handler is None:
            return Reply(404, {"error": f"no route {request.method} {request.path}"})
        behaviour = self.behaviour
        if behaviour is Behaviour.SLOW and self._stopping.wait(self.delay_s):
            raise ConnectionAbortedError("stand-in stopped while answering slowly")
        elif behaviour is Behaviour.ERROR_500:
            return Reply(500, {"error": "stand-in: internal server error"})
        return handler(request)

    def _model_request(self, request: Request) -> str | Reply:
        """The requested model name, or the reply that ends the request early."""
        body = request.body if isinstance(request.body, dict) else {}
        model = body.get("model")
        if self.behaviour is Behaviour.UNKNOWN_MODEL or model not in self.models:
            return _not_found(model)
        if self.behaviour is Behaviour.MALFORMED_JSON:
            return Reply(200, raw=b'{"model": "x", "embeddings": [[0.1, ')
        return str(model)

    # -- endpoints ----------------------------------------------------------------------

    def _embed(self, request: Request) -> Reply:
        model = self._model_request(request)
        if isinstance(model, Reply):
            return model
        raw_input = request.body.get("input", [])
        texts = [raw_input] if isinstance(raw_input, str) else list(raw_input)
        dimension = self.dimension
        behaviour = self.behaviour
        if behaviour is Behaviour.WRONG_DIMENSION:
            dimension += 1
        vectors = [standin_vector(str(text), dimension) for text in texts]
        if behaviour is Behaviour.NAN_VALUES:
            vectors = [[math.nan, *v[1:]] for v in vectors]
        elif behaviour is Behaviour.EMPTY_EMBEDDINGS:
            vectors = []
        elif behaviour is Behaviour.EMPTY_VECTOR:
            vectors = [[] for _ in vectors]
        elif behaviour is Behaviour.WRONG_COUNT:
            vectors = vectors[:-1]
        payload = {
            "model": model,
            "embeddings": vectors,
            "total_duration": 1000,
            "load_duration": 10,
            "prompt_eval_count": len(texts),
        }
        return Reply(200, raw=json.dumps(payload, allow_nan=True).encode())

    def _show(self, request: Request) -> Reply:
        model = self._model_request(request)
        if isinstance(model, Reply):
            return model
        return Reply(
            200,
            {
                "modelfile": "# stand-in",
                "parameters": "",
                "template": "",
                "details": {"format": "gguf", "family": "bert", "parameter_size": "1M"},
                "model_info": {"bert.embedding_length": self.dimension},
                "capabilities": ["embedding"],
            },
        )

    def _tags(self, request: Request) -> Reply:
        return Reply(200, {"models": [{"name": m, "model": m} for m in self.models]})

    def _version(self, request: Request) -> Reply:
        return Reply(200, {"version": STANDIN_VERSION})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    standin: OllamaStandIn

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Connections cut by ``stop()`` are expected; keep test output quiet."""


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like Ollama: pooled connections exist
    timeout = 10  # idle keep-alive connections end on their own
    disable_nagle_algorithm = True  # headers and body are separate writes: no 40 ms stalls
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.standin._track(self.connection, add=True)

    def finish(self) -> None:
        self.server.standin._track(self.connection, add=False)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the stand-in never prints request lines."""

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length) if length else b""
        try:
            body = json.loads(data) if data else None
        except json.JSONDecodeError:
            self._send(Reply(400, {"error": "stand-in: request body is not JSON"}))
            return
        path = self.path.split("?", 1)[0]
        headers = {name: value for name, value in self.headers.items()}
        self._send(self.server.standin._dispatch(Request(method, path, body, headers)))

    def _send(self, reply: Reply) -> None:
        if reply.chunks is not None:
            self._send_chunks(reply)
            return
        data = reply.raw if reply.raw is not None else json.dumps(reply.payload).encode()
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_chunks(self, reply: Reply) -> None:
        standin = self.server.standin
        standin.streamed_bytes = 0
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(reply.length))
        self.end_headers()
        try:
            for chunk in reply.chunks or ():
                self.wfile.write(chunk)
                self.wfile.flush()
                standin.streamed_bytes += len(chunk)
                if reply.chunk_delay_s and standin._stopping.wait(reply.chunk_delay_s):
                    return
        except OSError:  # the client hung up
            standin.hung_up.set()
            self.close_connection = True


@pytest.fixture
def ollama_standin() -> Iterator[OllamaStandIn]:
    """A started stand-in (dimension 8, model ``standin-embed``), stopped afterwards."""
    standin = OllamaStandIn()
    standin.start()
    try:
        yield standin
    finally:
        standin.stop()
