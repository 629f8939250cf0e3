"""End to end with a real Prometheus server, the way an operator's dashboard reads it.

A real ``prometheus`` (Debian's package) scrapes the engine's endpoint every second on
127.0.0.1; the test degrades a corpus, reads ``tandem_documents_degraded`` back through
Prometheus' HTTP query API, heals the corpus and watches the value fall to 0. Skipped
where the binary is absent — except in CI (``CI=true``), where it must run.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import CorpusConfig, SearchEngine
from engine.config import SentenceTransformerEmbedding
from tests.support.fakes import RecordingEmbedder
from tests.support.metrics_support import docs, fetch

POLL_TIMEOUT_S = 60.0


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        reason = f"{name} not installed (apt-get install --no-install-recommends prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run this test")
        pytest.skip(reason)
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Prometheus:
    def __init__(self, binary: str, workdir: Path, target_port: int) -> None:
        self.port = _free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  scrape_timeout: 1s\n"
            "  evaluation_interval: 1s\n"
            "scrape_configs:\n"
            "  - job_name: tandem\n"
            "    static_configs:\n"
            f"      - targets: ['127.0.0.1:{target_port}']\n",
            encoding="utf-8",
        )
        self.log = workdir / "prometheus.log"
        self._log_handle = open(self.log, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def query(self, promql: str) -> list[dict[str, object]]:
        url = f"{self.base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        status, _, body = fetch(url, timeout=5)
        if status != 200:
            return []
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        result: list[dict[str, object]] = answer["data"]["result"]
        return result

    def wait_for(self, promql: str, expected: float) -> None:
        """Poll until ``promql`` has exactly one series whose value is ``expected``."""
        deadline = time.monotonic() + POLL_TIMEOUT_S
        last: object = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited: {self.log.read_text(errors='replace')[-2000:]}")
            try:
                result = self.query(promql)
            except OSError as exc:  # not listening yet
                last = exc
            else:
                last = result
                if len(result) == 1 and float(result[0]["value"][1]) == expected:  # type: ignore[index]
                    return
            time.sleep(0.25)
        log = self.log.read_text(errors="replace")[-2000:]
        pytest.fail(f"{promql} never became {expected}; last answer {last!r}; log: {log}")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        self._log_handle.close()


@pytest.fixture
def prometheus_binary() -> str:
    return _binary("prometheus")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[tuple[SearchEngine, RecordingEmbedder]]:
    embedder = RecordingEmbedder()
    with SearchEngine(tmp_path / "engine", embedder_factory=lambda spec: embedder) as e:
        yield e, embedder


def test_prometheus_reads_degradation_and_healing(
    tmp_path: Path,
    prometheus_binary: str,
    engine: tuple[SearchEngine, RecordingEmbedder],
) -> None:
    search_engine, embedder = engine
    corpus = search_engine.create_corpus(
        CorpusConfig(name="docs", embedder=SentenceTransformerEmbedding(model="m"))
    )
    corpus.add(docs(3, "ok"))
    server = search_engine.serve_metrics(host="127.0.0.1", port=0)
    workdir = tmp_path / "prometheus"
    workdir.mkdir()
    prometheus = Prometheus(prometheus_binary, workdir, server.port)
    try:
        prometheus.wait_for('up{job="tandem"}', 1)
        prometheus.wait_for('tandem_documents_degraded{corpus="docs"}', 0)

        embedder.down = True
        corpus.add(docs(5, "late"))
        corpus.search("alpha bravo")
        prometheus.wait_for('tandem_documents_degraded{corpus="docs"}', 5)
        prometheus.wait_for('tandem_documents{corpus="docs"}', 8)
        prometheus.wait_for('tandem_embedder_up{corpus="docs"}', 0)
        prometheus.wait_for(
            'tandem_search_fallbacks_total{corpus="docs",reason="embedder_down"}', 1
        )

        embedder.down = False
        assert corpus.repair() == 5
        prometheus.wait_for('tandem_documents_degraded{corpus="docs"}', 0)
        prometheus.wait_for('tandem_repair_documents_total{corpus="docs"}', 5)
    finally:
        prometheus.stop()
