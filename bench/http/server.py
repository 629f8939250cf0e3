"""Building the benchmark's engine directory and running ``tandem serve`` on it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from bench.dataset import BeirDataset
from bench.encoder import SentenceEncoder
from bench.errors import BenchError
from bench.vector_cache import VectorCache

KEYWORD = "kw"
HYBRID = "hy"
_BATCH = 10_000


def build_engine(
    home: Path, dataset: BeirDataset, *, hybrid: bool, model: str, cache: VectorCache
) -> None:
    """A keyword corpus ``kw`` and (``hybrid``) a hybrid corpus ``hy`` holding ``dataset``."""
    from engine import CorpusConfig, Document, SearchEngine, SentenceTransformerEmbedding

    docs = [Document(id=d.doc_id, title=d.title, text=d.text) for d in dataset.documents]
    with SearchEngine(home) as engine:
        keyword = engine.create_corpus(CorpusConfig(name=KEYWORD, embedder=None))
        for start in range(0, len(docs), _BATCH):
            keyword.add(docs[start : start + _BATCH], progress=False)
        if hybrid:
            vectors, _ = cache.get_or_compute(SentenceEncoder(model), dataset, progress=False)
            spec = SentenceTransformerEmbedding(model=model)
            corpus = engine.create_corpus(CorpusConfig(name=HYBRID, embedder=spec))
            for start in range(0, len(docs), _BATCH):
                corpus.add(
                    docs[start : start + _BATCH],
                    embeddings=vectors[start : start + _BATCH],
                    progress=False,
                )


@contextmanager
def tandem_serve(
    home: Path,
    args: Sequence[str] = (),
    *,
    token: str | None = None,
    ready_timeout_s: float = 300.0,
) -> Iterator[str]:
    """Run ``tandem serve --port 0`` on ``home``; yield its base URL once ``/readyz`` is 200.

    ``token``: the server's write token (``TANDEM_API_TOKEN``); none: writes are refused.
    """
    tandem = shutil.which("tandem")
    if tandem is None:
        raise BenchError("the tandem command is not installed (pip install -e .)")
    env = {k: v for k, v in os.environ.items() if k not in ("TANDEM_HOME", "TANDEM_API_TOKEN")}
    if token is not None:
        env["TANDEM_API_TOKEN"] = token
    proc = subprocess.Popen(
        [tandem, "serve", "--port", "0", "--path", str(home), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("serving http://"):
            raise BenchError(f"tandem serve did not start: {line!r}")
        base = line.split()[1]
        deadline = time.monotonic() + ready_timeout_s
        while True:
            try:
                if httpx.get(base + "readyz", timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"tandem serve at {base} never became ready")
            time.sleep(0.2)
        yield base
    finally:
        stop_process(proc, grace_s=60)


@contextmanager
def floor_server() -> Iterator[str]:
    """Run ``bench.http.floor_app`` (a no-op app on the same uvicorn); yield its base URL."""
    errors = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed after the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.http.floor_app"],
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
        cwd=Path(__file__).resolve().parents[2],  # where ``bench`` imports from
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("serving http://"):
            proc.wait(timeout=30)
            errors.seek(0)
            raise BenchError(f"the floor app did not start: {line!r} {errors.read()[-2000:]}")
        yield line.split()[1]
    finally:
        stop_process(proc, grace_s=30)
        errors.close()


def stop_process(proc: subprocess.Popen[str], *, grace_s: float = 60.0) -> int:
    """SIGTERM, SIGKILL if it is still running after ``grace_s``; close its pipes and
    return its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return proc.returncode


def several_processes_allowed(home: Path) -> bool:
    """True when the engine lets two processes open one directory (``--workers`` > 1)."""
    from engine import EngineLocked, SearchEngine

    with SearchEngine(home):
        try:
            SearchEngine(home).close()
        except EngineLocked:
            return False
    return True
