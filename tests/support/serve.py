"""Running the real ``tandem serve`` in a subprocess for tests and benchmarks-in-tests.

The server binds a port the OS chooses (``--port 0``) and prints its address on its first
line; ``running_server`` reads it, waits for ``/readyz``, yields the base URL, and stops the
process with SIGTERM at the end (SIGKILL if it does not stop in time).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from bench.http.server import stop_process

TANDEM = shutil.which("tandem")


def serve_command(home: Path, *args: str) -> list[str]:
    if TANDEM is None:
        pytest.fail("the tandem console script is not installed (pip install -e .)")
    return [TANDEM, "serve", "--port", "0", "--path", str(home), *args]


@contextmanager
def running_server(
    home: Path,
    args: Sequence[str] = (),
    *,
    env: dict[str, str] | None = None,
    ready_timeout_s: float = 180.0,
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start ``tandem serve`` on ``home``; yield ``(base_url, process)`` once it is ready."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("TANDEM_HOME", "TANDEM_API_TOKEN")}
    full_env.update(env or {})
    proc = subprocess.Popen(
        serve_command(home, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("serving http://"):
            proc.kill()
            _, err = proc.communicate(timeout=30)
            pytest.fail(f"tandem serve did not start: {line!r} {err[-2000:]}")
        base = line.split()[1]
        deadline = time.monotonic() + ready_timeout_s
        while True:
            try:
                if httpx.get(base + "readyz", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"tandem serve at {base} never became ready")
            time.sleep(0.2)
        yield base, proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[str], timeout_s: float = 60.0) -> int:
    """SIGTERM, wait, SIGKILL if needed; returns the exit code."""
    return stop_process(proc, grace_s=timeout_s)
