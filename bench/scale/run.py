"""``python -m bench scale``: each size's stages run in fresh processes; one JSON line per
size, a Markdown table and a cost-against-size plot land in ``out_dir``."""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bench.encoder import DEFAULT_MODEL
from bench.errors import SystemUnavailable
from bench.plot import plot_cost_vs_size
from bench.report import git_revision, machine_info
from bench.scale.measure import ScaleJob, Stage, run_stage

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ScaleConfig:
    sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)
    n_queries: int = 200
    seed: int = 13
    model: str = DEFAULT_MODEL
    out_dir: Path = Path("bench-results") / "scale"
    tandem: bool = True
    progress: bool = True
    hnsw_m: int = 16
    hnsw_ef_construction: int = 40
    hnsw_ef_search: tuple[int, ...] = (128, 256)

    def __post_init__(self) -> None:
        if not self.sizes or any(n < 100 for n in self.sizes):
            raise ValueError("sizes must be non-empty and each >= 100")
        if self.n_queries < 1:
            raise ValueError("n_queries must be >= 1")
        if not self.hnsw_ef_search or min(self.hnsw_ef_search) < 1:
            raise ValueError("hnsw_ef_search needs at least one value >= 1")


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
    stages = (Stage.RAW, Stage.TANDEM) if tandem else (Stage.RAW,)
    for stage in stages:
        start = time.perf_counter()
        row.update(
            _spawn(
                ScaleJob(
                    n_docs=n_docs,
                    seed=config.seed,
                    n_queries=config.n_queries,
                    model=config.model,
                    stage=stage,
                    hnsw_m=config.hnsw_m,
                    hnsw_ef_construction=config.hnsw_ef_construction,
                    hnsw_ef_search=config.hnsw_ef_search,
                )
            )
        )
        row[f"{stage.value}_wall_s"] = time.perf_counter() - start
    if tandem:
        arms = row["embed_p50_ms"] + row["keyword_p50_ms"]
        arms += min(row["flat_p50_ms"], row["hnsw_p50_ms"])
        row["hybrid_overhead_ms"] = row["interleaved_hybrid_p50_ms"] - arms
    return row


def run_scale(config: ScaleConfig) -> list[dict[str, float]]:
    tandem = config.tandem and _tandem_available()
    if config.tandem and not tandem:
        logger.warning("engine API not importable: scale runs the raw arms only")
    header: dict[str, object] = {
        "revision": git_revision(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "config": {**asdict(config), "out_dir": str(config.out_dir), "tandem": tandem},
    }
    rows: list[dict[str, float]] = []
    config.out_dir.mkdir(parents=True, exist_ok=True)
    with (config.out_dir / "scale.jsonl").open("w", encoding="utf-8") as handle:
        for n_docs in tqdm(config.sizes, desc="scale", unit="size", disable=not config.progress):
            row = measure_size(config, n_docs, tandem)
            rows.append(row)
            handle.write(json.dumps({**header, **row}, sort_keys=True) + "\n")
            handle.flush()
    (config.out_dir / "scale.md").write_text(render_scale(rows, header), encoding="utf-8")
    sizes = [int(r["n_docs"]) for r in rows]

    def series(key: str) -> list[float | None]:
        return [r.get(key) for r in rows]

    plot_cost_vs_size(
        sizes,
        {
            "p50 latency per query, ms": {
                "keyword (tantivy)": series("keyword_p50_ms"),
                "dense flat": series("flat_p50_ms"),
                "dense HNSW": series("hnsw_p50_ms"),
                **{
                    f"dense HNSW ef={ef}": series(f"hnsw_ef{ef}_p50_ms")
                    for ef in config.hnsw_ef_search[1:]
                },
                "query embedding": series("embed_p50_ms"),
                "Tandem hybrid": series("tandem_hybrid_p50_ms"),
                "Tandem keyword": series("tandem_keyword_p50_ms"),
            },
            "ingest, docs/s": {
                "tantivy": series("keyword_ingest_docs_per_s"),
                "HNSW build": series("hnsw_ingest_docs_per_s"),
                "Tandem hybrid (precomputed vectors)": series("tandem_hybrid_ingest_docs_per_s"),
                "Tandem keyword": series("tandem_keyword_ingest_docs_per_s"),
            },
            "peak RSS, MiB": {
                "raw arms process": series("raw_peak_rss_mib"),
                "Tandem process": series("tandem_peak_rss_mib"),
            },
        },
        config.out_dir / "scale.png",
    )
    return rows


COLUMNS = (
    ("n_docs", "docs", 0),
    ("keyword_p50_ms", "tantivy p50 ms", 2),
    ("flat_p50_ms", "flat p50 ms", 2),
    ("hnsw_p50_ms", "HNSW p50 ms", 2),
    ("hnsw_recall_at_10", "HNSW R@10", 3),
    ("hnsw_ef256_p50_ms", "HNSW ef256 p50 ms", 2),
    ("hnsw_ef256_recall_at_10", "HNSW ef256 R@10", 3),
    ("embed_p50_ms", "embed p50 ms", 2),
    ("tandem_keyword_p50_ms", "Tandem kw p50 ms", 2),
    ("tandem_hybrid_p50_ms", "Tandem hybrid p50 ms", 2),
    ("interleaved_hybrid_p50_ms", "Tandem hybrid p50 interleaved ms", 2),
    ("hybrid_overhead_ms", "hybrid overhead ms", 2),
    ("keyword_ingest_docs_per_s", "tantivy docs/s", 0),
    ("hnsw_ingest_docs_per_s", "HNSW build docs/s", 0),
    ("tandem_hybrid_ingest_docs_per_s", "Tandem hybrid docs/s", 0),
    ("tandem_keyword_ingest_docs_per_s", "Tandem kw docs/s", 0),
    ("tandem_hybrid_first_queries_s", "Tandem hybrid first 3 searches s", 1),
    ("tandem_hybrid_reopen_s", "Tandem hybrid reopen + 1st search s", 1),
    ("raw_peak_rss_mib", "raw peak MiB", 0),
    ("tandem_peak_rss_mib", "Tandem peak MiB", 0),
    ("raw_wall_s", "raw wall s", 0),
    ("tandem_wall_s", "Tandem wall s", 0),
)


def render_scale(rows: list[dict[str, float]], header: dict[str, object]) -> str:
    def cell(row: dict[str, float], key: str, digits: int) -> str:
        value = row.get(key)
        return "–" if value is None else f"{value:,.{digits}f}"

    given: Any = header.get("config") or {}
    config: dict[str, Any] = {**asdict(ScaleConfig()), **given}
    lines = [
        "# Scale results",
        "",
        f"revision `{header['revision']}`, {header['timestamp']}; synthetic corpora "
        "(Zipfian pseudo-word text, random unit vectors, dim 384), top-10, one query at a "
        "time. Dense arm timed alone with random query vectors; HNSW "
        f"M={config['hnsw_m']}, efConstruction={config['hnsw_ef_construction']}, efSearch "
        f"{' and '.join(map(str, config['hnsw_ef_search']))} (the first is the headline; the "
        "engine's defaults are M=16, efConstruction=40, efSearch=128). Hybrid overhead = "
        "Tandem hybrid p50 − (embedding + tantivy + cheaper dense p50), hybrid and "
        "embedding timed in alternating blocks in one process (ONNX query path). Tandem "
        "docs/s time `Corpus.add` only; index work the engine defers to the first search "
        "shows in 'first 3 searches'; 'reopen' is a restart of the saved hybrid corpus "
        "plus one search. Peak RSS: the whole stage process (its own copy of the corpus "
        "text and vectors included), read after the corpora were closed (saved) and "
        "before the benchmark loads its query encoder.",
        "",
        "| " + " | ".join(label for _key, label, _d in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for row in rows:
        lines.append("| " + " | ".join(cell(row, k, d) for k, _label, d in COLUMNS) + " |")
    return "\n".join(lines) + "\n"
