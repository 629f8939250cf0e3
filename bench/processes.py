"""``python -m bench processes``: many processes on one engine directory.

Measures what the SQLite-like model promises, on one corpus (the bundled fixture unless
``--data`` names a BEIR folder), each figure from real, spawned processes:

- ``keyword_qps_ratio_2p`` / ``hybrid_qps_ratio_2p``: searches per second with two
  processes searching back to back, over one process doing the same (2.0 is the physical
  limit on two cores); the median over ``rounds`` alternating 1-then-2 runs. Hybrid uses
  the real model (all-MiniLM-L6-v2). ``*_cpu_ratio_2p`` is the same comparison in CPU
  time per search, which the machine's load moves far less: 1.0 means a second process
  on the directory costs each search nothing extra, so throughput is bounded by free
  cores only.
- ``p95_over_bound``: ``c`` clients spread over two processes (``c/2`` threads each),
  keyword search; their p95 over ``(c/2) × the single-client p95``.
- ``visibility_lag_p50_ms`` / ``_p99_ms``: a writer process adds one document at a time;
  a reader process searches in a loop for the next one; the time from ``add`` returning
  to the reader's first hit (keyword corpus).
- ``unchanged_search_overhead``: keyword search with the per-search change check against
  the same searches with the check replaced by a no-op: the median, over adjacent pairs
  of blocks in one process, of the pair's time ratio, minus one. ``change_check_us`` is
  the check alone, ``change_check_fraction`` that over the mean search without it.

Throughput ratios and latencies depend on the machine's load: the load average before and
after is recorded, and the figures are only comparable within one run.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.dataset import load_beir, portable_path
from bench.processes_worker import (
    LagJob,
    LoadJob,
    drain,
    lag_reader,
    lag_writer,
    overhead_probe,
    search_load,
)
from bench.report import git_revision, machine_info
from bench.run import FIXTURE_DIR

KEYWORD = "keyword"
HYBRID = "hybrid"
_LAG = "lag"
RESULT_NAME = "processes.json"


@dataclass(frozen=True, slots=True)
class ProcessesConfig:
    data_dir: Path = FIXTURE_DIR
    out_dir: Path = Path("bench-results") / "processes"
    duration_s: float = 5.0
    rounds: int = 2
    clients: tuple[int, ...] = (2, 4, 8)
    hybrid: bool = True
    lag_documents: int = 200
    lag_pause_s: float = 0.03
    overhead_blocks: int = 100
    work_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or self.lag_documents < 1 or self.overhead_blocks < 2:
            raise ValueError("duration, lag documents and overhead blocks must be positive")
        if self.rounds < 1:
            raise ValueError("rounds must be >= 1")
        if any(c < 2 or c % 2 for c in self.clients):
            raise ValueError("clients must be even numbers >= 2 (spread over two processes)")


@dataclass
class ProcessesResult:
    figures: dict[str, Any] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else 0.0


@dataclass(frozen=True, slots=True)
class LoadRun:
    qps: float
    latencies: list[float]
    cpu_per_search_s: float


def _load(
    root: Path,
    corpus: str,
    queries: tuple[str, ...],
    processes: int,
    threads: int,
    duration_s: float,
) -> LoadRun:
    """Run ``processes`` × ``threads`` clients for ``duration_s``."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=search_load,
            args=(LoadJob(str(root), corpus, queries, threads, duration_s, seed), barrier, results),
        )
        for seed in range(processes)
    ]
    for p in procs:
        p.start()
    reports = drain(results, processes, timeout_s=duration_s + 600)
    for p in procs:
        p.join(timeout=60)
    count = sum(r["count"] for r in reports)
    latencies = [x for r in reports for x in r["latencies"]]
    cpu = sum(r["cpu_s"] for r in reports)
    return LoadRun(count / duration_s, latencies, cpu / max(1, count))


def _scaling(
    root: Path, kind: str, queries: tuple[str, ...], config: ProcessesConfig
) -> tuple[dict[str, Any], list[float]]:
    """1 process, then 2, ``rounds`` times; the figures and the single-client latencies."""
    ones: list[LoadRun] = []
    twos: list[LoadRun] = []
    for _ in range(config.rounds):
        ones.append(_load(root, kind, queries, 1, 1, config.duration_s))
        twos.append(_load(root, kind, queries, 2, 1, config.duration_s))
    single = [x for run in ones for x in run.latencies]
    figures = {
        f"{kind}_qps_1p": round(statistics.median(r.qps for r in ones), 1),
        f"{kind}_qps_2p": round(statistics.median(r.qps for r in twos), 1),
        f"{kind}_qps_ratio_2p": round(
            statistics.median(b.qps / a.qps for a, b in zip(ones, twos, strict=True)), 3
        ),
        f"{kind}_cpu_ratio_2p": round(
            statistics.median(
                a.cpu_per_search_s / b.cpu_per_search_s for a, b in zip(ones, twos, strict=True)
            ),
            3,
        ),
        f"{kind}_single_p50_ms": round(_percentile(single, 50) * 1000, 3),
        f"{kind}_single_p95_ms": round(_percentile(single, 95) * 1000, 3),
        f"{kind}_cpu_ms_per_search_1p": round(
            statistics.median(r.cpu_per_search_s for r in ones) * 1000, 3
        ),
    }
    return figures, single


def _lag(root: Path, config: ProcessesConfig) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    stop = ctx.Event()
    job = LagJob(str(root), _LAG, config.lag_documents, config.lag_pause_s, seed=7)
    writer = ctx.Process(target=lag_writer, args=(job, barrier, results))
    reader = ctx.Process(target=lag_reader, args=(job, barrier, results, stop))
    writer.start()
    reader.start()
    reports = drain(results, 2, timeout_s=config.lag_documents * (config.lag_pause_s + 10) + 600)
    stop.set()
    for p in (writer, reader):
        p.join(timeout=60)
    returned = next(r["returned"] for r in reports if "returned" in r)
    read = next(r for r in reports if "found" in r)
    lags = [
        max(0.0, f - r) * 1000
        for f, r in zip(read["found"], returned, strict=False)
        if f is not None
    ]
    missed = sum(1 for f in read["found"] if f is None) + len(returned) - len(read["found"])
    return {
        "visibility_lag_p50_ms": round(_percentile(lags, 50), 2),
        "visibility_lag_p99_ms": round(_percentile(lags, 99), 2),
        "visibility_lag_max_ms": round(max(lags, default=0.0), 2),
        "visibility_documents": len(lags),
        "visibility_missed": missed,
        "visibility_reader_searches": read["searches"],
    }


def _build(root: Path, config: ProcessesConfig) -> tuple[str, ...]:
    from engine import CorpusConfig, Document, SearchEngine

    dataset = load_beir(config.data_dir)
    docs = [Document(id=d.doc_id, title=d.title, text=d.text) for d in dataset.documents]
    with SearchEngine(root) as engine:
        engine.create_corpus(CorpusConfig(name=KEYWORD, embedder=None)).add(docs)
        engine.create_corpus(CorpusConfig(name=_LAG, embedder=None)).add(docs)
        if config.hybrid:
            engine.create_corpus(CorpusConfig(name=HYBRID)).add(docs)
    return tuple(q.text for q in dataset.queries)


def run_processes(config: ProcessesConfig, say: Callable[[str], None] = print) -> ProcessesResult:
    result = ProcessesResult()
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(dir=config.work_dir) as tmp:
        root = Path(tmp) / "engine"
        say(f"building corpora from {config.data_dir} ...")
        queries = _build(root, config)
        figures = result.figures
        single_p95: dict[str, float] = {}
        for kind in (KEYWORD, HYBRID) if config.hybrid else (KEYWORD,):
            say(f"{kind}: 1 process, then 2, {config.rounds}x, {config.duration_s:g} s each ...")
            scaled, single = _scaling(root, kind, queries, config)
            figures.update(scaled)
            single_p95[kind] = _percentile(single, 95)
        over: dict[str, float] = {}
        for c in config.clients:
            say(f"keyword: {c} clients over 2 processes ...")
            lat = _load(root, KEYWORD, queries, 2, c // 2, config.duration_s).latencies
            p95 = _percentile(lat, 95)
            over[str(c)] = round(p95 / ((c / 2) * single_p95[KEYWORD]), 3)
            result.detail[f"keyword_p95_ms_c{c}"] = round(p95 * 1000, 3)
        figures["p95_over_bound"] = over
        say("visibility lag: one writer process, one reader process ...")
        figures.update(_lag(root, config))
        say("change-check overhead on unchanged searches ...")
        probe = overhead_probe(str(root), KEYWORD, queries, config.overhead_blocks)
        with_check = statistics.median(probe["with_check"])
        without = statistics.median(probe["without_check"])
        pairs = zip(probe["with_check"], probe["without_check"], strict=True)
        figures["unchanged_search_overhead"] = round(
            statistics.median(a / b for a, b in pairs) - 1, 4
        )
        figures["change_check_us"] = round(probe["check_s"] * 1e6, 2)
        figures["change_check_fraction"] = round(probe["check_s"] / without, 4)
        result.detail["search_ms_with_check"] = round(with_check * 1000, 4)
        result.detail["search_ms_without_check"] = round(without * 1000, 4)
    result.detail["load_average_before"] = load_before
    result.detail["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return result


def write_result(result: ProcessesResult, config: ProcessesConfig) -> Path:
    config.out_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "revision": git_revision(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "config": {
            k: portable_path(v) if isinstance(v, Path) else v for k, v in asdict(config).items()
        },
        **result.figures,
        "detail": result.detail,
        "note": "throughput and latency figures depend on machine load (see detail)",
    }
    path = config.out_dir / RESULT_NAME
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


_TARGETS: dict[str, tuple[str, float]] = {
    "keyword_qps_ratio_2p": (">=", 1.8),
    "hybrid_qps_ratio_2p": (">=", 1.5),
    "visibility_lag_p99_ms": ("<=", 100.0),
    "unchanged_search_overhead": ("<=", 0.02),
}


def render_table(result: ProcessesResult) -> str:
    rows = ["| figure | value | target |", "|---|---|---|"]
    for name, value in result.figures.items():
        if name == "p95_over_bound":
            for c, ratio in value.items():
                rows.append(f"| p95_over_bound c={c} | {ratio} | <= 1.5 |")
            continue
        op, bound = _TARGETS.get(name, ("", 0.0))
        rows.append(f"| {name} | {value} | {f'{op} {bound:g}' if op else ''} |")
    load = result.detail.get("load_average_before"), result.detail.get("load_average_after")
    rows.append(f"\nload average before / after: {load[0]} / {load[1]}")
    return "\n".join(rows)
