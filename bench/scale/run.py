"""``python -m bench scale``: each size's stages run in fresh processes sharing one work
directory; one JSON line per size, a Markdown table and a cost-against-size plot land in
``out_dir``."""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.dataset import portable_path
from bench.encoder import DEFAULT_MODEL
from bench.errors import SystemUnavailable
from bench.plot import plot_cost_vs_size
from bench.report import git_revision, machine_info
from bench.scale.anchors import DEFAULT_DATA_DIR
from bench.scale.measure import ScaleJob, run_stage, stages_for

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScaleConfig:
    sizes: tuple[int, ...] = (100_000, 1_000_000)
    n_queries: int = 200
    seed: int = 13
    model: str = DEFAULT_MODEL
    out_dir: Path = Path("bench-results") / "scale"
    tandem: bool = True
    keyword_corpus: bool = True  # the Tandem stage also loads a keyword-only corpus
    progress: bool = True
    realistic: bool = True
    data_dir: Path | None = DEFAULT_DATA_DIR
    hnsw_ef_search: tuple[int, ...] = (64, 256)  # reported besides the engine's efSearch

    def __post_init__(self) -> None:
        if not self.sizes or any(n < 100 for n in self.sizes):
            raise ValueError("sizes must be non-empty and each >= 100")
        if self.n_queries < 1:
            raise ValueError("n_queries must be >= 1")
        if any(ef < 1 for ef in self.hnsw_ef_search):
            raise ValueError("hnsw_ef_search values must be >= 1")


def _spawn(job: ScaleJob) -> dict[str, float]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(run_stage, job).result()


def _tandem_available() -> bool:
    from bench.systems.tandem import engine_api

    try:
        engine_api()
    except SystemUnavailable:
        return False
    return True


def measure_size(config: ScaleConfig, n_docs: int, tandem: bool) -> dict[str, float]:
    row: dict[str, float] = {"n_docs": float(n_docs)}
    with tempfile.TemporaryDirectory(prefix=f"bench-scale-{n_docs}-") as workdir:
        base = ScaleJob(
            n_docs=n_docs,
            seed=config.seed,
            n_queries=config.n_queries,
            model=config.model,
            stage=stages_for(tandem)[0][0],
            workdir=workdir,
            realistic=config.realistic,
            data_dir=None if config.data_dir is None else str(config.data_dir),
            hnsw_ef_search=config.hnsw_ef_search,
            keyword_corpus=config.keyword_corpus,
        )
        for stage, overrides in stages_for(tandem):
            job = dataclasses.replace(base, stage=stage, **overrides)
            start = time.perf_counter()
            row.update(_spawn(job))
            row[f"{job.label}_wall_s"] = time.perf_counter() - start
    derive(row)
    return row


def derive(row: dict[str, float]) -> None:
    """Figures computed from others: hybrid overhead, memory against the raw data."""
    if {"interleaved_hybrid_p50_ms", "embed_p50_ms", "keyword_p50_ms", "hnsw_p50_ms"} <= row.keys():
        arms = row["embed_p50_ms"] + row["keyword_p50_ms"] + row["hnsw_p50_ms"]
        row["hybrid_overhead_ms"] = row["interleaved_hybrid_p50_ms"] - arms
    if {"raw_vectors_mib", "tantivy_mib"} <= row.keys():
        raw = row["raw_vectors_mib"] + row["tantivy_mib"]
        for key in ("reopen_peak_rss_mib", "reopen_rss_after_open_mib", "tandem_peak_rss_mib"):
            if key in row:
                row[key.replace("_mib", "_vs_raw")] = row[key] / raw


def run_scale(config: ScaleConfig) -> list[dict[str, float]]:
    tandem = config.tandem and _tandem_available()
    if config.tandem and not tandem:
        logger.warning("engine API not importable: scale runs the raw arms only")
    header: dict[str, object] = {
        "revision": git_revision(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "load_avg_at_start": os.getloadavg(),
        "realistic_vectors": config.realistic,
        "config": {
            **asdict(config),
            "out_dir": portable_path(config.out_dir),
            "data_dir": None if config.data_dir is None else portable_path(config.data_dir),
            "tandem": tandem,
        },
    }
    rows: list[dict[str, float]] = []
    config.out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with (config.out_dir / "scale.jsonl").open("w", encoding="utf-8") as handle:
        for n_docs in tqdm(config.sizes, desc="scale", unit="size", disable=not config.progress):
            row = measure_size(config, n_docs, tandem)
            rows.append(row)
            line = {**header, **row, "realistic_vectors": config.realistic}
            handle.write(json.dumps(line, sort_keys=True) + "\n")
            handle.flush()
    header["wall_s"] = time.perf_counter() - start
    (config.out_dir / "scale.md").write_text(render_scale(rows, header), encoding="utf-8")
    _plot(rows, config.out_dir / "scale.png")
    return rows


def _plot(rows: list[dict[str, float]], path: Path) -> None:
    sizes = [int(r["n_docs"]) for r in rows]

    def series(key: str) -> list[float | None]:
        return [r.get(key) for r in rows]

    plot_cost_vs_size(
        sizes,
        {
            "p50 latency per query, ms": {
                "keyword (tantivy)": series("keyword_p50_ms"),
                "dense exact": series("exact_p50_ms"),
                "dense HNSW float32": series("hnsw_p50_ms"),
                "dense HNSW SQ8": series("sq8_p50_ms"),
                "query embedding": series("embed_p50_ms"),
                "Tandem hybrid (reopened)": series("reopened_hybrid_p50_ms"),
                "Tandem keyword": series("tandem_keyword_p50_ms"),
            },
            "recall@10 vs exact": {
                "HNSW float32": series("hnsw_recall_at_10"),
                "HNSW SQ8 + re-rank": series("sq8_recall_at_10"),
            },
            "peak RSS, MiB": {
                "raw arms process": series("raw_peak_rss_mib"),
                "Tandem ingest process": series("tandem_peak_rss_mib"),
                "Tandem reopened process": series("reopen_peak_rss_mib"),
            },
        },
        path,
    )


COLUMNS = (
    ("n_docs", "docs", 0),
    ("hnsw_ef_search", "efSearch", 0),
    ("hnsw_recall_at_10", "HNSW R@10", 3),
    ("hnsw_ef64_recall_at_10", "ef64 R@10", 3),
    ("hnsw_ef256_recall_at_10", "ef256 R@10", 3),
    ("sq8_recall_at_10", "SQ8 R@10", 3),
    ("exact_p50_ms", "exact p50 ms", 1),
    ("hnsw_p50_ms", "HNSW p50 ms", 2),
    ("hnsw_p95_ms", "HNSW p95 ms", 2),
    ("sq8_p50_ms", "SQ8 p50 ms", 2),
    ("keyword_p50_ms", "tantivy p50 ms", 2),
    ("embed_p50_ms", "embed p50 ms", 2),
    ("reopened_hybrid_p50_ms", "hybrid p50 ms", 2),
    ("reopened_hybrid_p95_ms", "hybrid p95 ms", 2),
    ("hybrid_overhead_ms", "hybrid overhead ms", 2),
    ("graph_build_s", "graph build s", 0),
    ("slowest_search_during_build_s", "slowest dense search in build s", 2),
    ("tandem_graph_ready_s", "Tandem graph ready s", 0),
    ("tandem_slowest_hybrid_during_build_s", "slowest hybrid in build s", 2),
    ("tandem_hybrid_reopen_s", "reopen + 1st search s", 2),
    ("float32_reopen_s", "float32 index reopen s", 2),
    ("sq8_reopen_s", "SQ8 index reopen s", 2),
    ("raw_vectors_mib", "raw vectors MiB", 0),
    ("tantivy_mib", "tantivy MiB", 0),
    ("reopen_peak_rss_mib", "reopened peak MiB", 0),
    ("reopen_peak_rss_vs_raw", "reopened / raw", 2),
    ("tandem_peak_rss_mib", "ingest peak MiB", 0),
    ("dense-reopen-float32_peak_rss_mib", "float32 index peak MiB", 0),
    ("dense-reopen-sq8_peak_rss_mib", "SQ8 index peak MiB", 0),
    ("tandem_hybrid_ingest_docs_per_s", "hybrid docs/s", 0),
    ("tandem_keyword_ingest_docs_per_s", "keyword docs/s", 0),
    ("raw_load_avg_start", "load at start", 1),
    ("tandem_load_avg_end", "load at end", 1),
)


HNSW_THRESHOLD = 50_000
"""``dense.FaissIndex``'s default ``hnsw_threshold``: below it the index builds no graph."""

# Columns whose figures come from a graph when one serves, from the exact path otherwise;
# the row key telling which (``measure_dense`` records it; older rows: the size).
GRAPH_COLUMNS = {
    "hnsw_ef_search": "hnsw_graph_serving",
    "hnsw_recall_at_10": "hnsw_graph_serving",
    "hnsw_ef64_recall_at_10": "hnsw_graph_serving",
    "hnsw_ef256_recall_at_10": "hnsw_graph_serving",
    "hnsw_p50_ms": "hnsw_graph_serving",
    "hnsw_p95_ms": "hnsw_graph_serving",
    "sq8_recall_at_10": "sq8_graph_serving",
    "sq8_p50_ms": "sq8_graph_serving",
}


def graph_served(row: dict[str, float], flag: str) -> bool:
    """Whether the row's graph figures (``flag``: see ``GRAPH_COLUMNS``) came from a graph."""
    if flag in row:
        return bool(row[flag])
    return row.get("n_docs", 0.0) >= HNSW_THRESHOLD


def render_scale(rows: list[dict[str, float]], header: dict[str, object]) -> str:
    def cell(row: dict[str, float], key: str, digits: int) -> str:
        value = row.get(key)
        if value is None:
            return "–"
        flag = GRAPH_COLUMNS.get(key)
        if flag is None or graph_served(row, flag):
            return f"{value:,.{digits}f}"
        if key == "hnsw_ef_search":
            return "exact"  # no graph: efSearch was not used
        return f"{value:,.{digits}f} (exact)"

    exact_rows = any(
        not graph_served(row, flag)
        for row in rows
        for flag in ("hnsw_graph_serving", "sq8_graph_serving")
    )

    given: Any = header.get("config") or {}
    realistic = given.get("realistic", True)
    vectors = (
        "vectors drawn around real MiniLM embeddings, real query embeddings"
        if realistic
        else "random unit vectors and random queries"
    )
    wall = header.get("wall_s")
    lines = [
        "# Scale results",
        "",
        f"revision `{header['revision']}`, {header['timestamp']}"
        + (f", whole run {float(wall) / 60:.1f} min" if isinstance(wall, int | float) else "")
        + f"; synthetic text (Zipfian pseudo-words), {vectors}; dim 384, top-10, one query "
        "at a time. Dense figures: the engine's vector index alone (`dense.FaissIndex`); "
        "recall@10 against exact search on the same vectors. Hybrid: a Tandem corpus "
        "reopened in a fresh process. Load average (1 min) at the start of the raw stage "
        "and the end of the Tandem stage: latencies are only as good as that load."
        + (
            " The dense figures are measured on the graph the Tandem corpus built and saved "
            "(no second build: its time is `Tandem graph ready s`, with hybrid searches "
            "running)."
            if given.get("tandem")
            else ""
        )
        + (
            f" Cells marked (exact): the index held no graph (below {HNSW_THRESHOLD:,} "
            "vectors it builds none), so those HNSW and SQ8 figures are the exact search "
            "path's and efSearch was not used."
            if exact_rows
            else ""
        ),
        "",
        "| " + " | ".join(label for _key, label, _d in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for row in rows:
        lines.append("| " + " | ".join(cell(row, k, d) for k, _label, d in COLUMNS) + " |")
    return "\n".join(lines) + "\n"
