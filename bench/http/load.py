"""Search QPS and latency over HTTP with wrk, against the in-process call as a baseline.

For each worker count (1, and 2 when the engine admits several processes per directory),
each corpus (keyword, hybrid) and each connection count (1, 4, 16), wrk POSTs search
bodies cycling through the dataset's queries for ``duration_s`` seconds; a Lua script
(``search.lua``) starts each wrk thread at its own query, the same ones every run (the
first thread at the first query, a second one half the list on), and reports requests,
p50/p95/p99 latency and errors as JSON. wrk runs on the same machine as the server, so
it competes for the cores; the machine's load average is recorded with every run.

The HTTP overhead is measured in paired rounds (``overhead_rounds``): in each round the
same queries are timed through ``Corpus.search`` in this process and then through one
wrk connection to a one-worker server on the same directory, and the overhead is the
median over rounds of the difference of the two p50s. One baseline taken before the
server started varied by ±0.3 ms from run to run on a 2-core machine — as much as the
figure it was meant to measure.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from bench.errors import BenchError
from bench.http.server import HYBRID, KEYWORD, floor_server, tandem_serve

if TYPE_CHECKING:
    from engine import Corpus

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
    server_request_ms: float
    """Mean wall time of these requests inside the server (route search, from /metrics)."""
    server_search_ms: float
    """Mean wall time of ``Corpus.search`` inside those requests (from /metrics)."""

    @property
    def server_overhead_ms(self) -> float:
        """What the HTTP layer adds per request inside the server (both means, same window,
        same requests, so the machine's load affects both alike)."""
        return self.server_request_ms - self.server_search_ms


@dataclass(frozen=True, slots=True)
class Baseline:
    corpus: str
    searches: int
    p50_ms: float
    p95_ms: float


@dataclass(frozen=True, slots=True)
class OverheadRound:
    corpus: str
    in_process_p50_ms: float
    http_p50_ms: float
    floor_p50_ms: float
    """wrk's p50 in the same round against ``bench.http.floor_app`` (no application)."""

    @property
    def overhead_ms(self) -> float:
        return self.http_p50_ms - self.in_process_p50_ms


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
        return _timed_searches(engine.corpus(corpus), queries, rounds)


def _timed_searches(target: Corpus, queries: list[str], rounds: int) -> Baseline:
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
        corpus=target.name,
        searches=len(times),
        p50_ms=statistics.median(times) * 1000,
        p95_ms=times[int(0.95 * (len(times) - 1))] * 1000,
    )


def overhead_rounds(
    home: Path, queries: list[str], corpora: list[str], rounds: int, duration_s: float
) -> list[OverheadRound]:
    """Paired rounds of (in-process p50, HTTP p50 over one connection to one worker)."""
    from engine import SearchEngine

    out: list[OverheadRound] = []
    with tempfile.TemporaryDirectory(prefix="tandem-wrk-") as tmp:
        bodies = _bodies_file(queries, Path(tmp))
        with (
            SearchEngine(home) as engine,
            tandem_serve(home, ["--workers", "1"]) as base,
            floor_server() as floor_base,
        ):
            floor_url = f"{floor_base}v1/corpora/floor/search"
            for corpus in corpora:
                _warm_up(base, corpus, queries)
                target = engine.corpus(corpus)
                url = f"{base}v1/corpora/{corpus}/search"
                for _ in range(rounds):
                    local = _timed_searches(target, queries, 1)
                    # One connection, one wrk thread: it starts at the first query, as
                    # the in-process pass does, but runs for a time, not a whole number
                    # of cycles. Time for 3 cycles (estimated from the in-process p50,
                    # with a margin) keeps the unfinished cycle's share of the requests,
                    # and so its pull on the p50, to about a quarter at most
                    cycles_s = 3 * len(queries) * local.p50_ms / 1000 * 1.3
                    remote = _wrk(url, bodies, 1, max(duration_s, math.ceil(cycles_s)))
                    floor = _wrk(floor_url, bodies, 1, duration_s)
                    out.append(
                        OverheadRound(
                            corpus,
                            local.p50_ms,
                            remote["p50_us"] / 1000,
                            floor["p50_us"] / 1000,
                        )
                    )
    return out


def _wrk(url: str, bodies: Path, connections: int, duration_s: float) -> dict[str, float]:
    wrk = shutil.which("wrk")
    if wrk is None:
        raise BenchError("wrk is not installed (apt-get install wrk)")
    threads = min(connections, 2)
    script = resources.files("bench.http") / "search.lua"
    with resources.as_file(script) as script_path:
        result = subprocess.run(
            [
                wrk,
                f"-t{threads}",
                f"-c{connections}",
                f"-d{duration_s:g}s",
                "--timeout",
                "30s",
                "-s",
                str(script_path),
                url,
                "--",
                str(bodies),
                str(threads),  # the script spreads the threads' start over the bodies
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


_SEARCH_ROUTE = 'route="/v1/corpora/{name}/search"'


def _sums(base: str, corpus: str) -> tuple[float, float, float, float]:
    """(request seconds, requests, search seconds, searches) so far, from ``/metrics``."""
    text = httpx.get(base + "metrics", timeout=60).text
    values = {"rs": 0.0, "rc": 0.0, "ss": 0.0, "sc": 0.0}
    for line in text.splitlines():
        if line.startswith("tandem_http_request_duration_seconds_") and _SEARCH_ROUTE in line:
            key = "rs" if line.startswith("tandem_http_request_duration_seconds_sum") else "rc"
            if "_sum" in line or "_count" in line:
                values[key] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("tandem_search_duration_seconds_") and f'corpus="{corpus}"' in line:
            if line.startswith("tandem_search_duration_seconds_sum"):
                values["ss"] += float(line.rsplit(" ", 1)[1])
            elif line.startswith("tandem_search_duration_seconds_count"):
                values["sc"] += float(line.rsplit(" ", 1)[1])
    return values["rs"], values["rc"], values["ss"], values["sc"]


def _mean_ms(after: float, before: float, n_after: float, n_before: float) -> float:
    count = n_after - n_before
    return (after - before) / count * 1000 if count else 0.0


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
                        before = _sums(base, corpus)
                        figures = _wrk(url, bodies, connections, duration_s)
                        after = _sums(base, corpus)
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
                                server_request_ms=_mean_ms(
                                    after[0], before[0], after[1], before[1]
                                ),
                                server_search_ms=_mean_ms(after[2], before[2], after[3], before[3]),
                            )
                        )
    return runs


def as_dicts(
    items: list[LoadRun] | list[Baseline] | list[OverheadRound],
) -> list[dict[str, object]]:
    out = []
    for item in items:
        row = asdict(item)
        if isinstance(item, LoadRun):
            row["server_overhead_ms"] = item.server_overhead_ms
        if isinstance(item, OverheadRound):
            row["overhead_ms"] = item.overhead_ms
        out.append(row)
    return out


__all__ = [
    "CONNECTIONS",
    "HYBRID",
    "KEYWORD",
    "Baseline",
    "LoadRun",
    "OverheadRound",
    "in_process_baseline",
    "load_runs",
    "overhead_rounds",
]
