"""``python -m bench cluster``: a sharded corpus against one node, on a local Ray cluster.

What it measures (``cluster.json`` keys in brackets), everything through the public API:

- quality: SciFact-style nDCG@10 of one node and of ``--shards`` shards, keyword-only
  and hybrid, from the same documents and vectors (``single_keyword_ndcg10``,
  ``sharded_keyword_ndcg10``, ``single_hybrid_ndcg10``, ``sharded_hybrid_ndcg10``);
- latency: hybrid search p50/p95 of each, timed in alternating blocks so both see the
  same machine load (``p50_overhead_ms``, ``p95_overhead_ms``; keyword too);
- embedding: documents/s of one and of two embedding actors (``embed_scaling_2_actors``)
  and end-to-end Ray Data ingest documents/s (``ingest_docs_per_s``);
- faults: a shard SIGKILLed during an ingest and during a search loop
  (``lost_documents``, ``search_errors``, lowest ``tandem_shards_up`` seen);
- capacity: one shard's memory and query rate at ``--capacity-docs`` synthetic documents,
  measured once its vector graph serves (``capacity_graph_ready``).

The machine is shared: the load average is recorded at start and end, and latency
figures move with it (quality and loss figures do not).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.cluster_faults import ingest_with_kill, search_loop_with_kill
from bench.cluster_measures import embed_scaling, end_to_end_ingest, shard_capacity
from bench.dataset import BeirDataset, dataset_record, load_beir, search_ids
from bench.encoder import DEFAULT_MODEL, SentenceEncoder
from bench.quality import evaluate
from bench.report import git_revision
from bench.timing import LatencyStats, time_interleaved
from bench.vector_cache import DEFAULT_CACHE_DIR, VectorCache
from engine import (
    CorpusConfig,
    Document,
    SearchableCorpus,
    SearchEngine,
    SentenceTransformerEmbedding,
)

logger = logging.getLogger(__name__)

BATCH = 1_000
STAGES = ("quality", "latency", "embed", "ingest", "faults", "capacity")


@dataclass(frozen=True)
class ClusterBenchConfig:
    data_dir: Path
    out_dir: Path
    shards: int = 4
    model: str = DEFAULT_MODEL
    cache_dir: Path = DEFAULT_CACHE_DIR
    rounds: int = 3
    embed_docs: int = 400
    ingest_docs: int = 1_000
    loop_seconds: float = 20.0
    capacity_docs: int = 50_000
    stages: frozenset[str] = frozenset(STAGES)
    progress: bool = True

    def __post_init__(self) -> None:
        problem = config_problem(self.shards, self.loop_seconds, self.stages)
        if problem is not None:
            raise ValueError(problem)


def config_problem(shards: int, loop_seconds: float, stages: frozenset[str]) -> str | None:
    """Why these options cannot run (``None``: they can). The faults stage SIGKILLs shard 1
    while searches go on, so it needs a second shard, and a search loop of some length."""
    if shards < 1:
        return f"--shards must be >= 1, got {shards}"
    if "faults" in stages and shards < 2:
        return f"the faults stage needs --shards >= 2 (it kills one shard), got {shards}"
    if not loop_seconds > 0:  # NaN too
        return f"--loop-seconds must be > 0, got {loop_seconds:g}"
    return None


def run_cluster_bench(config: ClusterBenchConfig) -> dict[str, Any]:
    from engine.cluster import start_local_cluster

    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    start_local_cluster(num_cpus=2)
    load_start = os.getloadavg()
    dataset = load_beir(config.data_dir)
    vectors, _ = VectorCache(config.cache_dir).get_or_compute(
        SentenceEncoder(config.model), dataset, progress=config.progress
    )
    docs = [Document(id=d.doc_id, title=d.title, text=d.text) for d in dataset.documents]
    results: dict[str, Any] = {
        "corpus": dataset.name,
        "dataset": dataset_record(dataset, config.data_dir),
        "documents": len(docs),
        "queries": len(dataset.queries),
        "shards": config.shards,
        "model": config.model,
        "revision": git_revision(),
        "load_avg_start": list(load_start),
        "cpus": os.cpu_count(),
    }
    stages = config.stages
    with tempfile.TemporaryDirectory(prefix="tandem-cluster-bench-") as tmp:
        root = Path(tmp)
        if stages & {"quality", "latency", "faults"}:
            results.update(_compare(config, root, dataset, docs, vectors))
        if "embed" in stages:
            results.update(embed_scaling(config.model, dataset, config.embed_docs))
        if "ingest" in stages:
            results.update(
                end_to_end_ingest(root, dataset, config.shards, config.model, config.ingest_docs)
            )
        if "faults" in stages:
            results.update(ingest_with_kill(root, docs, vectors, config.shards, config.model))
        if "capacity" in stages and config.capacity_docs > 0:
            results.update(shard_capacity(root, config.capacity_docs, config.model))
    results["load_avg_end"] = list(os.getloadavg())
    config.out_dir.mkdir(parents=True, exist_ok=True)
    (config.out_dir / "cluster.json").write_text(json.dumps(results, indent=2) + "\n", "utf-8")
    (config.out_dir / "cluster.md").write_text(render_table(results), "utf-8")
    return results


def _compare(
    config: ClusterBenchConfig,
    root: Path,
    dataset: BeirDataset,
    docs: Sequence[Document],
    vectors: np.ndarray,
) -> dict[str, Any]:
    """One node and ``config.shards`` shards over the same documents and vectors:
    quality, latency, and a shard killed during a search loop."""
    from engine.cluster import ClusterOptions, ShardedCorpus

    results: dict[str, Any] = {}
    hybrid = SentenceTransformerEmbedding(model=config.model)
    engine = SearchEngine(root / "single")
    single = {
        "keyword": engine.create_corpus(CorpusConfig(name="kw", embedder=None)),
        "hybrid": engine.create_corpus(CorpusConfig(name="hy", embedder=hybrid)),
    }
    # Each kind twice: the default (each shard's own BM25 statistics) and with global
    # term statistics (``ClusterOptions.global_term_statistics``), so the report sets
    # that option's quality beside its latency.
    dfs = ClusterOptions(global_term_statistics=True)
    sharded = {
        "keyword": ShardedCorpus.create(
            root / "sharded-kw", CorpusConfig(name="kw", embedder=None), config.shards
        ),
        "hybrid": ShardedCorpus.create(
            root / "sharded-hy", CorpusConfig(name="hy", embedder=hybrid), config.shards
        ),
        "keyword_dfs": ShardedCorpus.create(
            root / "sharded-kw-dfs",
            CorpusConfig(name="kw", embedder=None),
            config.shards,
            options=dfs,
        ),
        "hybrid_dfs": ShardedCorpus.create(
            root / "sharded-hy-dfs",
            CorpusConfig(name="hy", embedder=hybrid),
            config.shards,
            options=dfs,
        ),
    }
    try:
        everything: list[SearchableCorpus] = [*single.values(), *sharded.values()]
        for corpus in everything:
            _load(corpus, docs, vectors, config.model)
        if "quality" in config.stages:
            results.update(_quality(dataset, single, sharded))
        if "latency" in config.stages:
            results.update(_latency(dataset, single, sharded, config.rounds))
            results.update(_round_trip(sharded["keyword"]))
        if "faults" in config.stages:
            texts = [q.text for q in dataset.queries]
            results.update(search_loop_with_kill(sharded["hybrid"], texts, config.loop_seconds))
    finally:
        for corpus in sharded.values():
            corpus.close()
        engine.close()
    return results


def _round_trip(corpus: Any) -> dict[str, float]:
    """The floor under any sharded search on this machine: a no-op call to every shard."""
    import ray

    handles = corpus._calls.handles
    samples = []
    for _ in range(200):
        started = time.perf_counter()
        ray.get([h.ping.remote() for h in handles])
        samples.append(time.perf_counter() - started)
    stats = LatencyStats.from_seconds(samples)
    return {
        "ray_round_trip_all_shards_p50_ms": round(stats.p50_ms, 3),
        "ray_round_trip_all_shards_p95_ms": round(stats.p95_ms, 3),
    }


def _load(
    corpus: SearchableCorpus, docs: Sequence[Document], vectors: np.ndarray, model: str
) -> None:
    hybrid = corpus.config.embedder is not None
    for start in range(0, len(docs), BATCH):
        chunk = docs[start : start + BATCH]
        if hybrid:
            corpus.add(
                chunk,
                embeddings=vectors[start : start + BATCH],
                embedding_model=model,
                progress=False,
            )
        else:
            corpus.add(chunk, progress=False)


def _quality(
    dataset: BeirDataset,
    single: Mapping[str, SearchableCorpus],
    sharded: Mapping[str, SearchableCorpus],
) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, corpora in (("single", single), ("sharded", sharded)):
        for kind, corpus in corpora.items():
            run = {q.query_id: dataset.ranking(q, search_ids(corpus), 10) for q in dataset.queries}
            out[f"{label}_{kind}_ndcg10"] = round(evaluate(dataset.qrels, run).ndcg_at_10, 4)
    for kind in sharded:
        base = kind.removesuffix("_dfs")
        out[f"{kind}_ndcg10_delta"] = round(
            out[f"sharded_{kind}_ndcg10"] - out[f"single_{base}_ndcg10"], 4
        )
    return out


def _latency(
    dataset: BeirDataset,
    single: Mapping[str, SearchableCorpus],
    sharded: Mapping[str, SearchableCorpus],
    rounds: int,
) -> dict[str, float]:
    texts = [q.text for q in dataset.queries]
    out: dict[str, float] = {}
    for kind in ("hybrid", "keyword"):
        one, many = single[kind], sharded[kind]
        for text in texts[:20]:  # warm every one timed (model sessions, caches)
            one.search(text)
            many.search(text)
            if f"{kind}_dfs" in sharded:
                sharded[f"{kind}_dfs"].search(text)
        s1, s2 = _paired(one.search, many.search, texts, rounds)
        prefix = "" if kind == "hybrid" else "keyword_"
        out[f"{prefix}single_p50_ms"] = round(s1.p50_ms, 3)
        out[f"{prefix}single_p95_ms"] = round(s1.p95_ms, 3)
        out[f"{prefix}sharded_p50_ms"] = round(s2.p50_ms, 3)
        out[f"{prefix}sharded_p95_ms"] = round(s2.p95_ms, 3)
        out[f"{prefix}p50_overhead_ms"] = round(s2.p50_ms - s1.p50_ms, 3)
        out[f"{prefix}p95_overhead_ms"] = round(s2.p95_ms - s1.p95_ms, 3)
        out[f"{prefix}sharded_qps_one_client"] = round(s2.qps, 1)
        if f"{kind}_dfs" in sharded:  # the statistics round's cost, paired the same way
            # A pairing of its own: its default-statistics p50 is the baseline of the cost
            # (not ``sharded_p50_ms`` above, which another pairing measured).
            own, dfs = _paired(many.search, sharded[f"{kind}_dfs"].search, texts, rounds)
            out[f"{kind}_dfs_baseline_p50_ms"] = round(own.p50_ms, 3)
            out[f"{kind}_dfs_sharded_p50_ms"] = round(dfs.p50_ms, 3)
            out[f"{kind}_dfs_p50_cost_ms"] = round(dfs.p50_ms - own.p50_ms, 3)
    return out


def _paired(
    first: Callable[[str], object], second: Callable[[str], object], texts: list[str], rounds: int
) -> tuple[LatencyStats, LatencyStats]:
    """Both over the same texts in alternating blocks, which goes first alternating by round."""
    a: list[float] = []
    b: list[float] = []
    for r in range(rounds):
        if r % 2 == 0:
            x, y = time_interleaved(first, second, texts)
        else:
            y, x = time_interleaved(second, first, texts)
        a.extend(x)
        b.extend(y)
    return LatencyStats.from_seconds(a), LatencyStats.from_seconds(b)


TARGETS: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
    ("keyword_ndcg10_delta", "|Δ| ≤ 0.005", lambda v: abs(v) <= 0.005),
    ("hybrid_ndcg10_delta", "|Δ| ≤ 0.005", lambda v: abs(v) <= 0.005),
    ("p50_overhead_ms", "≤ 3 ms", lambda v: v <= 3.0),
    ("embed_scaling_2_actors", "≥ 1.6×", lambda v: v >= 1.6),
    ("lost_documents", "0", lambda v: v == 0),
    ("search_errors", "0", lambda v: v == 0),
)


def render_table(results: dict[str, Any]) -> str:
    lines = [
        f"# Sharded ({results['shards']} shards) vs one node — {results['corpus']}, "
        f"{results['documents']} docs, {results['queries']} queries, rev {results['revision']}",
        "",
        f"load average {results['load_avg_start'][0]:.2f} at start, "
        f"{results['load_avg_end'][0]:.2f} at end, {results['cpus']} CPUs (shared machine: "
        "latency and throughput figures are noisy; quality and loss figures are not)",
        "",
        "| measure | value |",
        "|---|---|",
    ]
    skip = {"corpus", "dataset", "documents", "queries", "shards", "revision", "load_avg_start"}
    skip |= {"load_avg_end", "cpus", "model"}
    dfs_kinds = [k for k in ("hybrid", "keyword") if f"{k}_dfs_baseline_p50_ms" in results]
    for kind in dfs_kinds:  # in their own table below, baseline beside its own cost
        skip |= {f"{kind}_dfs_{x}_ms" for x in ("baseline_p50", "sharded_p50", "p50_cost")}
    for key, value in results.items():
        if key not in skip:
            lines.append(f"| {key} | {value} |")
    if dfs_kinds:
        lines += [
            "",
            "Global term statistics, sharded p50 ms: default → with the statistics round, "
            "both from the same paired rounds (a pairing separate from the one against "
            "one node above).",
            "",
            "| kind | default p50 ms | global statistics p50 ms | cost ms |",
            "|---|---|---|---|",
        ]
        for kind in dfs_kinds:
            lines.append(
                f"| {kind} | {results[f'{kind}_dfs_baseline_p50_ms']} | "
                f"{results[f'{kind}_dfs_sharded_p50_ms']} | "
                f"{results[f'{kind}_dfs_p50_cost_ms']} |"
            )
    lines += ["", "| target | wanted | measured | met |", "|---|---|---|---|"]
    for key, wanted, check in TARGETS:
        if key in results:
            value = results[key]
            lines.append(f"| {key} | {wanted} | {value} | {'yes' if check(value) else 'NO'} |")
    return "\n".join(lines) + "\n"


def main_cluster(argv: Sequence[str]) -> int:
    """``python -m bench cluster [--data DIR] [--out DIR] ...`` (registered in bench.cli)."""
    import argparse

    from bench.run import FIXTURE_DIR

    parser = argparse.ArgumentParser(
        prog="python -m bench cluster",
        description="A sharded corpus (Ray actors on a local cluster) against one node: "
        "quality, latency overhead, embedding scaling, ingest, faults, shard capacity.",
    )
    parser.add_argument("--data", type=Path, help="a BEIR folder (default: the fixture)")
    parser.add_argument("--out", type=Path, default=Path("bench-results") / "cluster")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--rounds", type=int, default=3, help="latency rounds over the queries")
    parser.add_argument("--embed-docs", type=int, default=400)
    parser.add_argument("--ingest-docs", type=int, default=1_000)
    parser.add_argument("--loop-seconds", type=float, default=20.0)
    parser.add_argument(
        "--capacity-docs", type=int, default=60_000, help="0 skips the shard-capacity run"
    )
    parser.add_argument(
        "--stages",
        default=",".join(STAGES),
        help="comma-separated subset of: %(default)s",
    )
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    stages = frozenset(x.strip() for x in args.stages.split(",") if x.strip())
    unknown = stages - set(STAGES)
    if unknown:
        parser.error(f"unknown stages {sorted(unknown)}; valid: {', '.join(STAGES)}")
    problem = config_problem(args.shards, args.loop_seconds, stages)
    if problem is not None:
        parser.error(problem)
    config = ClusterBenchConfig(
        data_dir=args.data or FIXTURE_DIR,
        out_dir=args.out,
        shards=args.shards,
        model=args.model,
        cache_dir=args.cache,
        rounds=args.rounds,
        embed_docs=args.embed_docs,
        ingest_docs=args.ingest_docs,
        loop_seconds=args.loop_seconds,
        capacity_docs=args.capacity_docs,
        stages=stages,
        progress=not args.no_progress,
    )
    results = run_cluster_bench(config)
    print(render_table(results))
    return 0
