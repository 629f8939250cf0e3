"""Search QPS and latency over HTTP with wrk, against the in-process call as a baseline.

For each worker count (1, and 2 when the engine admits several processes per directory),
each corpus (keyword, hybrid) and each connection count (1, 4, 16), wrk POSTs search
bodies cycling through the dataset's queries for ``duration_s`` seconds; a Lua script
reports requests, p50/p95/p99 latency and errors as JSON. The baseline times
``Corpus.search`` for the same queries in one thread of one process, before the server
starts. wrk runs on the same machine as the server, so it competes for the cores; the
machine's load average is recorded with every run.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import httpx

from bench.errors import BenchError
from bench.http.server import HYBRID, KEYWORD, tandem_serve

CONNECTIONS = (1, 4, 16)
TOP_K = 10


@dataclass(frozen=True, slots=True)
class LoadRun:
    workers: int
    corpus: str
    connections: int
    requests: int
    qps: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    status_errors: int
    socket_errors: int
    loadavg_1m: float


@dataclass(frozen=True, slots=True)
class Baseline:
    corpus: str
    searches: int
    p50_ms: float
    p95_ms: float


def _bodies_file(queries: list[str], directory: Path) -> Path:
    path = directory / "bodies.jsonl"
    with open(path, "w", encoding="utf-8") as out:
        for query in queries:
            out.write(json.dumps({"query": query, "top_k": TOP_K}, ensure_ascii=False) + "\n")
    return path


def in_process_baseline(home: Path, corpus: str, queries: list[str], rounds: int = 3) -> Baseline:
    """``Corpus.search`` timed one call at a time (after one warm-up pass)."""
    from engine import SearchEngine

    with SearchEngine(home) as engine:
        target = engine.corpus(corpus)
        for query in queries[:50]:
            target.search(query, top_k=TOP_K)
        times: list[float] = []
        for _ in range(rounds):
            for query in queries:
                start = time.perf_counter()
                target.search(query, top_k=TOP_K)
                times.append(time.perf_counter() - start)
    times.sort()
    return Baseline(
        corpus=corpus,
        searches=len(times),
        p50_ms=statistics.median(times) * 1000,
        p95_ms=times[int(0.95 * (len(times) - 1))] * 1000,
    )


def _wrk(url: str, bodies: Path, connections: int, duration_s: float) -> dict[str, float]:
    wrk = shutil.which("wrk")
    if wrk is None:
        raise BenchError("wrk is not installed (apt-get install wrk)")
    script = resources.files("bench.http") / "search.lua"
    with resources.as_file(script) as script_path:
        result = subprocess.run(
            [
                wrk,
                f"-t{min(connections, 2)}",
                f"-c{connections}",
                f"-d{duration_s:g}s",
                "--timeout",
                "30s",
                "-s",
                str(script_path),
                url,
                "--",
                str(bodies),
            ],
            capture_output=True,
            text=True,
            timeout=duration_s + 120,
        )
    for line in result.stdout.splitlines():
        if line.startswith("TANDEM_RESULT "):
            parsed: dict[str, float] = json.loads(line.split(" ", 1)[1])
            return parsed
    raise BenchError(f"wrk printed no result: {result.stdout[-500:]} {result.stderr[-500:]}")


def _warm_up(base: str, corpus: str, queries: list[str]) -> None:
    with httpx.Client(timeout=120) as client:
        for query in queries[:30]:
            client.post(
                f"{base}v1/corpora/{corpus}/search", json={"query": query}
            ).raise_for_status()


def load_runs(
    home: Path,
    queries: list[str],
    corpora: list[str],
    worker_counts: list[int],
    duration_s: float,
) -> list[LoadRun]:
    runs: list[LoadRun] = []
    with tempfile.TemporaryDirectory(prefix="tandem-wrk-") as tmp:
        bodies = _bodies_file(queries, Path(tmp))
        for workers in worker_counts:
            with tandem_serve(home, ["--workers", str(workers)]) as base:
                for corpus in corpora:
                    _warm_up(base, corpus, queries)
                    url = f"{base}v1/corpora/{corpus}/search"
                    for connections in CONNECTIONS:
                        figures = _wrk(url, bodies, connections, duration_s)
                        seconds = figures["duration_us"] / 1e6
                        runs.append(
                            LoadRun(
                                workers=workers,
                                corpus=corpus,
                                connections=connections,
                                requests=int(figures["requests"]),
                                qps=figures["requests"] / seconds if seconds else 0.0,
                                p50_ms=figures["p50_us"] / 1000,
                                p95_ms=figures["p95_us"] / 1000,
                                p99_ms=figures["p99_us"] / 1000,
                                status_errors=int(figures["status_errors"]),
                                socket_errors=int(figures["socket_errors"]),
                                loadavg_1m=os.getloadavg()[0],
                            )
                        )
    return runs


def as_dicts(items: list[LoadRun] | list[Baseline]) -> list[dict[str, object]]:
    return [asdict(item) for item in items]


__all__ = [
    "CONNECTIONS",
    "HYBRID",
    "KEYWORD",
    "Baseline",
    "LoadRun",
    "in_process_baseline",
    "load_runs",
]
