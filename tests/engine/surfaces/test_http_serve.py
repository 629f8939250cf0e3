"""``tandem serve`` as a user runs it: a real uvicorn process on a port the OS chose.

One keyword-only engine directory, one server process for the main checks (reads, a
write with the token file, metrics, a clean stop on SIGTERM that releases the
directory). Start-up refusals (a short token, several workers on a directory that admits
one process) are one clear line and exit code 1.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from engine import CorpusConfig, Document, EngineLocked, InvalidArgument, SearchEngine
from engine.surfaces.http.protocol import MAX_HEAD_BYTES
from engine.surfaces.http.settings import ServerSettings, load_token
from tests.support.serve import running_server, serve_command, stop

TOKEN = "serve-test-token-0123456789abcdef"


def build(home: Path) -> Path:
    with SearchEngine(home) as engine:
        engine.create_corpus(CorpusConfig(name="help", embedder=None)).add(
            [
                Document(
                    id="reset",
                    title="Reset your password",
                    text="Open Settings.",
                    url="/help/reset",
                ),
                Document(
                    id="vault",
                    title="Vault",
                    text="password rotation",
                    access_groups=frozenset({"staff"}),
                ),
            ]
        )
    return home


def test_serve_answers_reads_and_token_writes_then_stops_cleanly(tmp_path: Path) -> None:
    home = build(tmp_path / "engine")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    with running_server(home, ["--token-file", str(token_file)]) as (base, proc):
        assert base.startswith("http://127.0.0.1:")
        hits = httpx.post(f"{base}v1/corpora/help/search", json={"query": "password"}, timeout=30)
        assert [p["source_id"] for p in hits.json()["passages"]] == ["reset"]
        denied = httpx.post(f"{base}v1/corpora/help/documents", json=[{"id": "x"}], timeout=30)
        assert denied.status_code == 401
        added = httpx.post(
            f"{base}v1/corpora/help/documents",
            json=[{"id": "export", "title": "Export", "text": "password export"}],
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=60,
        )
        assert added.status_code == 200 and added.json()["added"] == 1
        metrics = httpx.get(f"{base}metrics", timeout=30).text
        assert 'tandem_searches_total{corpus="help",strategy="keyword"} 1.0' in metrics
        assert httpx.get(base, timeout=30).headers["content-type"].startswith("text/html")
        # A head past the cap is refused before it is read to the end (httptools has no
        # cap of its own: a 150 MB header held the event loop ~27 s); the server goes on.
        assert _raw_status(base, b"X-Padding: " + b"a" * (1 << 20)) == 431
        assert _raw_status(base, b"X-Padding: " + b"a" * 60_000) == 200  # under the cap
        # Regression: the cap held only while a head was incomplete after a read, so a
        # read that crossed 64 KiB and ended the head was answered (200, or uvicorn's 400
        # for a URL too long for its URL parser).
        assert _raw_status(base, b"X-Padding: " + b"a" * 70_000) == 431  # one write
        request_line = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
        first, second = b"X-A: " + b"a" * 40_000 + b"\r\n", b"X-B: " + b"b" * 30_000
        assert _raw_answer(base, request_line + first, second + b"\r\n\r\n") == 431
        many = b"\r\n".join(b"X-H%d: " % i + b"h" * 1_000 for i in range(70))
        assert _raw_status(base, many) == 431
        assert _raw_answer(base, b"GET /healthz?q=" + b"u" * 70_000 + b" HTTP/1.1\r\n\r\n") == 431
        assert _raw_answer(base, b"GET /healthz?q=" + b"u" * 60_000 + b" HTTP/1.1\r\n\r\n") == 200
        at_cap = b"X-Padding: " + b"a" * (MAX_HEAD_BYTES - len(request_line) - 15)
        assert len(request_line + at_cap) + 4 == MAX_HEAD_BYTES
        assert _raw_status(base, at_cap) == 200  # exactly 64 KiB
        assert _raw_status(base, at_cap + b"a") == 431
        assert httpx.get(f"{base}healthz", timeout=30).status_code == 200
        assert stop(proc) == 0
        assert proc.stderr is None or proc.stderr.closed
    with SearchEngine(home) as engine:  # the server released the directory and kept the write
        assert len(engine.corpus("help")) == 3


def _raw_status(base: str, header: bytes) -> int:
    """The status a GET of /healthz with ``header`` gets, sent over a raw socket."""
    return _raw_answer(base, b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + header + b"\r\n\r\n")


def _raw_answer(base: str, *writes: bytes) -> int:
    """The status a request sent as ``writes`` (a pause between them) over a raw socket
    gets."""
    host, port = base.removeprefix("http://").rstrip("/").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as conn:
        with contextlib.suppress(OSError):  # the server may close before all is sent
            for i, data in enumerate(writes):
                if i:
                    time.sleep(0.2)
                conn.sendall(data)
        status_line = conn.makefile("rb").readline()
    return int(status_line.split()[1])


def _fails_with(args: list[str], home: Path, env: dict[str, str] | None = None) -> str:
    import os

    full = {k: v for k, v in os.environ.items() if k != "TANDEM_API_TOKEN"} | (env or {})
    result = subprocess.run(
        serve_command(home, *args), capture_output=True, text=True, timeout=180, env=full
    )
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tandem: error: "), result.stderr
    return lines[0]


def test_an_unusable_token_is_refused_at_start(tmp_path: Path) -> None:
    home = build(tmp_path / "engine")
    short = tmp_path / "short"
    short.write_text("abc", encoding="utf-8")
    assert "at least 16 characters" in _fails_with(["--token-file", str(short)], home)
    assert "TANDEM_API_TOKEN" in _fails_with([], home, {"TANDEM_API_TOKEN": "short"})


@pytest.mark.parametrize("token", ["pässwörd-ünïcode-tøken-1234", "tab\tinside-a-long-token"])
def test_a_token_no_client_could_send_is_refused(tmp_path: Path, token: str) -> None:
    """Review: a non-ASCII token was accepted at start and then never matched — httpx
    refuses to send it, curl sends its UTF-8 bytes, which the server reads as Latin-1."""
    token_file = tmp_path / "token"
    token_file.write_text(token, encoding="utf-8")
    with pytest.raises(InvalidArgument, match="printable ASCII"):
        load_token(ServerSettings(home=tmp_path, token_file=token_file))
    token_file.write_text("A-printable-ASCII-token~!", encoding="utf-8")
    assert (
        load_token(ServerSettings(home=tmp_path, token_file=token_file))
        == "A-printable-ASCII-token~!"
    )


def _many_processes_supported(home: Path) -> bool:
    with SearchEngine(home):
        try:
            SearchEngine(home).close()
        except EngineLocked:
            return False
    return True


def test_workers_share_one_directory_or_the_refusal_says_why(tmp_path: Path) -> None:
    home = build(tmp_path / "engine")
    if not _many_processes_supported(home):
        assert "--workers 1" in _fails_with(["--workers", "2"], home)
        return
    with running_server(home, ["--workers", "2"]) as (base, _):
        for _ in range(20):
            hits = httpx.post(
                f"{base}v1/corpora/help/search", json={"query": "password"}, timeout=30
            )
            assert [p["source_id"] for p in hits.json()["passages"]] == ["reset"]
        # Metrics aggregate both workers (prometheus_client multiprocess mode).
        text = httpx.get(f"{base}metrics", timeout=30).text
        line = next(
            x
            for x in text.splitlines()
            if x.startswith('tandem_searches_total{corpus="help",strategy="keyword"}')
        )
        assert float(line.rsplit(" ", 1)[1]) == 20.0
        assert 'tandem_documents{corpus="help"} 1.0' in text  # one value (public: 1 of 2)
        # A corpus dropped (here by another process) leaves no series behind: the
        # workers' files keep them, and the scrape leaves out corpora that are gone.
        with SearchEngine(home) as other:
            other.create_corpus(CorpusConfig(name="gone", embedder=None)).add(
                [Document(id="g", text="password gone")]
            )
            for _ in range(4):
                httpx.post(f"{base}v1/corpora/gone/search", json={"query": "password"}, timeout=30)
            assert 'corpus="gone"' in httpx.get(f"{base}metrics", timeout=30).text
            other.drop_corpus("gone")
        assert 'corpus="gone"' not in httpx.get(f"{base}metrics", timeout=30).text


@pytest.mark.parametrize("flag", ["--help"])
def test_serve_help_lists_the_options_without_bool_placeholders(flag: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [*serve_command(tmp_path)[:2], flag], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0
    for option in ("--host", "--port", "--workers", "--token-file", "--path"):
        assert option in result.stdout
    assert "<bool>" not in result.stdout


def test_serve_refuses_a_query_embed_deadline_the_request_budget_would_cut_first(
    tmp_path: Path,
) -> None:
    SearchEngine(tmp_path).close()
    result = subprocess.run(
        serve_command(tmp_path, "--query-embed-timeout", "10"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "deadline (10 s) must be shorter than the request budget (10 s)" in result.stderr
    assert "Traceback" not in result.stderr


def test_accepted_connections_send_without_waiting_for_acks() -> None:
    """Nagle's algorithm off on every accepted connection: uvicorn binds with protocol 0,
    and asyncio sets TCP_NODELAY only on sockets whose protocol is TCP - without it a
    response's body waited for the client's delayed ACK of its headers (40 ms a request)."""
    import socket

    from engine.surfaces.http.serve import _without_nagle

    listener = _without_nagle(socket.create_server(("127.0.0.1", 0)))
    try:
        assert listener.proto == socket.IPPROTO_TCP
        assert listener.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        with socket.create_connection(listener.getsockname()[:2], timeout=30):
            accepted, _ = listener.accept()
            with accepted:
                assert accepted.proto == socket.IPPROTO_TCP  # asyncio's condition for NODELAY
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        listener.close()


def test_the_announced_address_accepts_connections_before_the_server_loop_runs() -> None:
    """``tandem serve`` prints its address as soon as the socket is bound; a client that
    connects right then must be queued, not refused (uvicorn listens only once it runs)."""
    import socket

    import uvicorn

    from engine.surfaces.http.serve import listening_socket

    sock = listening_socket(uvicorn.Config("engine.surfaces.http.app:app_from_env", port=0))
    try:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        with socket.create_connection(sock.getsockname()[:2], timeout=30):
            pass  # no server loop has run: the connection waits in the backlog
    finally:
        sock.close()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_port_in_use_is_one_clear_error_and_nothing_is_left_behind(
    tmp_path: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: uvicorn logged the bind error and exited 3; with workers a temporary
    metrics directory and the process's environment changes were left behind."""
    import os
    import socket
    import tempfile

    from engine import InvalidArgument
    from engine.surfaces.http.serve import MULTIPROC_ENV, serve_http
    from engine.surfaces.http.settings import SETTINGS_ENV, ServerSettings

    home = build(tmp_path / "engine")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp would leave one
    before = {name: os.environ.get(name) for name in (SETTINGS_ENV, MULTIPROC_ENV)}
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(InvalidArgument, match=f"cannot listen on 127.0.0.1:{port}"):
            serve_http(ServerSettings(home=home), port=port, workers=workers)
    assert not list(tmp_path.glob("tandem-metrics-*"))
    assert {name: os.environ.get(name) for name in before} == before


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.timeout(240)
def test_workers_stop_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    """Regression: uvicorn's workers went on serving after `tandem serve --workers 2` was
    killed with SIGKILL (the OOM killer, kill -9): they kept the port, so a restart
    could not listen, and the engine directory open."""
    import os
    import signal
    import time

    home = build(tmp_path / "engine")
    with running_server(home, ["--workers", "2"]) as (base, proc):
        workers = _children(proc.pid)
        assert workers
        try:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
            deadline = time.monotonic() + 120
            while [w for w in workers if Path(f"/proc/{w}").exists()]:
                assert time.monotonic() < deadline, "the workers outlived their supervisor"
                time.sleep(0.5)
            with pytest.raises(httpx.TransportError):
                httpx.get(f"{base}readyz", timeout=5)
        finally:  # never leave orphans behind on a failure
            for worker in workers:
                with contextlib.suppress(OSError):
                    os.kill(worker, signal.SIGKILL)


def test_a_dead_servers_metrics_directory_is_swept_at_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import tempfile

    from engine.surfaces.http import serve

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = tmp_path / f"tandem-metrics-{gone.pid}-abc"
    live = tmp_path / f"tandem-metrics-{os.getpid()}-def"
    other = tmp_path / "tandem-metrics-notapid"
    for directory in (stale, live, other):
        directory.mkdir()
    serve._sweep_metrics_dirs_of_dead_servers()
    assert not stale.exists() and live.exists() and other.exists()


def test_a_corpus_that_cannot_be_opened_leaves_the_others_served(tmp_path: Path) -> None:
    # Opening every corpus at start raised for a damaged one: the whole server exited
    # (code 3, or 0 with two workers), serving nothing.
    home = build(tmp_path / "engine")
    with SearchEngine(home) as engine:
        engine.create_corpus(CorpusConfig(name="broken", embedder=None))
    (home / "corpora" / "broken" / "config.json").write_text("{not json", encoding="utf-8")
    with running_server(home) as (base, _):
        found = httpx.post(f"{base}v1/corpora/help/search", json={"query": "password"}, timeout=30)
        assert [p["source_id"] for p in found.json()["passages"]] == ["reset"]
        broken = httpx.post(
            f"{base}v1/corpora/broken/search", json={"query": "password"}, timeout=30
        )
        assert broken.status_code >= 500 and set(broken.json()) == {"error"}


def test_a_request_asking_to_upgrade_is_answered_by_the_app(tmp_path: Path) -> None:
    # uvicorn handed it to its WebSocket protocol, whose bare 403 skipped the app: no
    # nosniff, no no-store, no error shape, not counted.
    home = build(tmp_path / "engine")
    with running_server(home) as (base, _):
        upgrade = {
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        }
        answer = httpx.get(f"{base}v1/corpora", headers=upgrade, timeout=30)
        assert answer.status_code == 200 and "help" in answer.text
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["cache-control"] == "no-store"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_workers_that_fail_to_start_end_the_server_with_an_error(
    tmp_path: Path, workers: str
) -> None:
    # With two workers uvicorn stopped and returned as after a clean stop: exit 0, which a
    # service manager takes for an intended one. The failure is made in every process
    # (workers are spawned) by a sitecustomize on the path.
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(
        "import engine.surfaces.http.app as app\n"
        "def _fail(engine):\n"
        "    raise RuntimeError('injected: the app cannot start')\n"
        "app._open_all = _fail\n",
        encoding="utf-8",
    )
    import os

    path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
    home = build(tmp_path / "engine")
    full = {k: v for k, v in os.environ.items() if k != "TANDEM_API_TOKEN"} | {"PYTHONPATH": path}
    result = subprocess.run(
        serve_command(home, "--workers", workers),
        capture_output=True,
        text=True,
        timeout=180,
        env=full,
    )
    assert result.returncode == 1, (result.returncode, result.stderr[-2000:])
    assert "tandem: error: " in result.stderr and "did not start" in result.stderr
