"""Running the app on uvicorn: one process, or a supervisor with N worker processes.

The listening socket is bound here, before any worker starts, so ``port=0`` works (the
OS picks a port and every worker shares the socket) and the address can be announced
at once. Workers are fresh interpreters (uvicorn spawns them); each builds its app from
``TANDEM_SERVE_SETTINGS`` and opens the engine directory itself. With more than one
worker, prometheus_client's multiprocess mode aggregates their metrics: every worker
writes to a private temporary directory that ``/metrics`` reads and that is removed
when the server stops.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from engine import EngineLocked, InvalidArgument, SearchEngine
from engine.surfaces.http.protocol import BoundedHeadProtocol
from engine.surfaces.http.settings import SETTINGS_ENV, ServerSettings, load_token

__all__ = ["check_many_processes", "listening_socket", "serve_http"]

logger = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
SUPERVISOR_ENV = "TANDEM_SERVE_SUPERVISOR"
"""The pid of a multi-worker server's supervisor, for its workers to watch."""
APP_FACTORY = "engine.surfaces.http.app:app_from_env"
_METRICS_PREFIX = "tandem-metrics-"
_WATCH_INTERVAL_S = 1.0


def _without_nagle(sock: socket.socket) -> socket.socket:
    """``sock`` re-wrapped so that asyncio turns Nagle's algorithm off on every accepted
    connection. uvicorn binds with protocol 0, and asyncio sets TCP_NODELAY only on sockets
    whose protocol reads IPPROTO_TCP: without this, a response's body waited for the
    client's delayed ACK of its headers - 40 ms on every request."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return sock
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return socket.socket(sock.family, sock.type, socket.IPPROTO_TCP, fileno=sock.detach())


def listening_socket(config: uvicorn.Config) -> socket.socket:
    """The server's socket, bound and already listening, with Nagle off (``_without_nagle``).

    uvicorn's ``bind_socket`` binds but listens only once the server starts, so a client
    that connected as soon as the address was announced was refused; listening here, a
    connection made after the announcement waits in the backlog until a worker accepts it.
    """
    sock = _without_nagle(_bound(config))
    sock.listen(config.backlog)
    return sock


def _bound(config: uvicorn.Config) -> socket.socket:
    """A TCP socket bound to the config's address, as uvicorn's ``bind_socket`` makes it,
    but an address in use is an ``InvalidArgument`` (uvicorn logs it and exits 3)."""
    if config.uds is not None or config.fd is not None:
        return config.bind_socket()
    family = socket.AF_INET6 if config.host and ":" in config.host else socket.AF_INET
    sock = socket.socket(family=family)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((config.host, config.port))
    except OSError as exc:
        sock.close()
        raise InvalidArgument(
            f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}"
        ) from None
    sock.set_inheritable(True)  # the workers of a multi-process server inherit it
    return sock


def check_many_processes(settings: ServerSettings) -> None:
    """Raise ``InvalidArgument`` when this engine directory admits one process at a time."""
    first = SearchEngine(settings.home)
    try:
        second = SearchEngine(settings.home)
    except EngineLocked:
        raise InvalidArgument(
            "--workers above 1 needs an engine directory that several processes may open, "
            "and this version of the engine admits one process at a time; use --workers 1"
        ) from None
    else:
        second.close()
    finally:
        first.close()


@contextmanager
def _stop_signals_end_quietly() -> Iterator[None]:
    """After its graceful shutdown uvicorn re-raises the stop signal to the handler that was
    installed before it; with this one that is a no-op, so SIGTERM ends in exit code 0."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_http(
    settings: ServerSettings,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    announce: Callable[[str], None] = print,
) -> None:
    """Serve until SIGINT/SIGTERM. Raises ``InvalidArgument`` for an unusable setting."""
    if not 1 <= workers <= 64:
        raise InvalidArgument("workers must be in 1..64")
    load_token(settings)  # an unusable token fails here, not in every worker
    if workers > 1:
        check_many_processes(settings)
    settings = settings.model_copy(update={"multiprocess_metrics": workers > 1})
    config = uvicorn.Config(
        APP_FACTORY,
        factory=True,
        http=BoundedHeadProtocol,  # httptools, with a cap on a request's head
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
        access_log=False,  # request lines can carry what a person typed (/?q=...)
        server_header=False,
        proxy_headers=False,
        timeout_graceful_shutdown=10,
        timeout_worker_healthcheck=60,  # a busy machine can take seconds to start a worker
        lifespan="on",
        # No WebSocket protocol: the app has no WebSocket route, and uvicorn handed any
        # request with an Upgrade header to one, whose bare 403 skipped the app (no
        # nosniff, no error shape, not counted). Without it the request reaches the app.
        ws="none",
    )
    sock = listening_socket(config)  # before anything is changed that must be undone
    metrics_dir = None
    if workers > 1:
        _sweep_metrics_dirs_of_dead_servers()
        metrics_dir = tempfile.mkdtemp(prefix=f"{_METRICS_PREFIX}{os.getpid()}-")
    names = (SETTINGS_ENV, MULTIPROC_ENV, SUPERVISOR_ENV)
    saved = {name: os.environ.get(name) for name in names}
    try:
        os.environ[SETTINGS_ENV] = settings.to_env()
        if metrics_dir is not None:
            os.environ[MULTIPROC_ENV] = metrics_dir
            os.environ[SUPERVISOR_ENV] = str(os.getpid())
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
        plural = "worker" if workers == 1 else "workers"
        announce(
            f"serving http://{shown}:{bound_port}/ ({workers} {plural}; API /v1, docs /docs, "
            "metrics /metrics)"
        )
        server = uvicorn.Server(config)
        if workers == 1:
            with _stop_signals_end_quietly():
                try:
                    server.run(sockets=[sock])
                except SystemExit as exc:  # uvicorn exits so when the app did not start
                    if exc.code != STARTUP_FAILURE:
                        raise
            if not server.started:
                raise InvalidArgument("the server did not start (see the error above)")
        else:
            supervisor = Multiprocess(config, sockets=[sock])
            supervisor.run()
            if any(worker.exitcode == STARTUP_FAILURE for worker in supervisor.processes):
                # (uvicorn stops every worker then, and returned as after a clean stop:
                # exit 0, which a service manager takes for an intended one)
                raise InvalidArgument("the server's workers did not start (see the error above)")
    finally:
        sock.close()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)


def end_with_supervisor() -> None:
    """In a worker of a multi-worker server: stop (SIGTERM to itself, uvicorn's graceful
    shutdown) once the supervisor is gone. uvicorn's workers go on serving when their
    supervisor is killed (SIGKILL, the OOM killer): they kept the port, so a restart
    could not listen, and the engine directory. Polled (once a second) rather than
    ``PR_SET_PDEATHSIG``, which fires when the *thread* that started the worker ends."""
    raw = os.environ.get(SUPERVISOR_ENV, "")
    if not raw.isdigit():
        return
    supervisor = int(raw)  # uvicorn's workers are its children: another parent means it
    # died before this worker got here (it was still starting), and the worker stops now

    def watch() -> None:
        while os.getppid() == supervisor:
            time.sleep(_WATCH_INTERVAL_S)
        logger.warning("the server's supervisor is gone; this worker stops")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="tandem-supervisor-watch", daemon=True).start()


def _sweep_metrics_dirs_of_dead_servers() -> None:
    """Remove the metrics directories of servers that died without cleaning up (a
    supervisor killed with SIGKILL skips its ``finally``); the pid is in the name."""
    for directory in Path(tempfile.gettempdir()).glob(f"{_METRICS_PREFIX}*-*"):
        pid = directory.name[len(_METRICS_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(directory, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True
