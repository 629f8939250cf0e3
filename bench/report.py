"""Writing a run: ``results.jsonl`` (one line per corpus × system, with the git revision and
configuration), ``results.md`` (tables + ratios) and ``results.png`` (the plot)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.plot import plot_quality_vs_latency
from bench.ratios import CorpusRatios, compute_ratios
from bench.results import CorpusFloor, Status, SystemResult
from bench.significance import PERMUTATIONS, RESAMPLES, SEED, paired_test
from bench.systems.base import SystemName
from bench.systems.registry import SPECS

if TYPE_CHECKING:
    from bench.run import RunConfig

JSONL_NAME = "results.jsonl"
MARKDOWN_NAME = "results.md"
PLOT_NAME = "results.png"
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class RunReport:
    config: RunConfig
    results: tuple[SystemResult, ...]
    floors: tuple[CorpusFloor, ...]

    def ratios(self) -> list[CorpusRatios]:
        return [compute_ratios(floor, self.results) for floor in self.floors]


def git_revision(repo: Path = REPO_ROOT) -> str:
    """``git rev-parse HEAD`` of the checkout bench runs from, ``"unknown"`` if unavailable."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def config_json(config: RunConfig) -> dict[str, Any]:
    """The run's configuration; paths relative to the working directory (or ``~/``)."""
    from bench.dataset import portable_path

    data = asdict(config)
    data["data_dirs"] = [portable_path(p) for p in config.data_dirs]
    data["systems"] = [s.value for s in config.systems]
    data["out_dir"] = portable_path(config.out_dir)
    data["cache_dir"] = portable_path(config.cache_dir)
    data["backend"] = config.backend.value if config.backend else "auto"
    data["floor_backends"] = [b.value for b in config.floor_backends]
    return data


def write_report(report: RunReport, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "jsonl": out_dir / JSONL_NAME,
        "markdown": out_dir / MARKDOWN_NAME,
        "plot": out_dir / PLOT_NAME,
    }
    header = {
        "revision": git_revision(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
        "config": config_json(report.config),
    }
    floors = {f.corpus: f for f in report.floors}
    with paths["jsonl"].open("w", encoding="utf-8") as handle:
        for result in report.results:
            floor = floors.get(result.corpus)
            line = {
                **header,
                **result.to_json(),
                "dataset": _dataset_json(result.corpus, floor),
                "query_embedding_p50_ms": floor.p50_ms_by_backend if floor else {},
                "encoder_docs_per_s": floor.encoder_docs_per_s if floor else None,
            }
            handle.write(json.dumps(line, sort_keys=True) + "\n")
    paths["markdown"].write_text(render_markdown(report, header), encoding="utf-8")
    floor_ms = {f.corpus: f.floor_ms for f in report.floors if f.floor_ms is not None}
    plot_quality_vs_latency(report.results, paths["plot"], floor_ms)
    return paths


def _dataset_json(corpus: str, floor: CorpusFloor | None) -> dict[str, Any]:
    if floor is None:
        return {"name": corpus, "path": ""}
    return {
        "name": corpus,
        "path": floor.dataset_path,
        "judgements": floor.split,
        "self_indexed_queries": floor.self_indexed_queries,
    }


def _fmt(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


COLUMNS = (
    "system | nDCG@10 | R@100 | MRR@10 | ingest docs/s (embedding incl.) "
    "| index-only docs/s | p50 ms | p95 ms | QPS | peak RSS MiB | disk MiB"
)
N_COLUMNS = COLUMNS.count("|") + 1


def _row(r: SystemResult) -> str:
    if r.status is not Status.OK:
        label = "skipped" if r.status is Status.SKIPPED else "error"
        return f"| {r.system} | {label}: {r.reason} |" + " |" * (N_COLUMNS - 2)
    cells = [
        r.system,
        _fmt(r.ndcg_at_10, 4),
        _fmt(r.recall_at_100, 4),
        _fmt(r.mrr_at_10, 4),
        _fmt(r.ingest_e2e_docs_per_s, 0),
        _fmt(r.ingest_docs_per_s, 0),
        _fmt(r.p50_ms, 2),
        _fmt(r.p95_ms, 2),
        _fmt(r.qps, 0),
        _fmt(r.peak_rss_mib, 0),
        _fmt(r.disk_mib, 1),
    ]
    return "| " + " | ".join(cells) + " |"


def _ratio_lines(ratios: CorpusRatios) -> list[str]:
    lines = [
        f"- query-embedding floor p50 (the raw encoder in a process of its own): "
        f"{_fmt(ratios.floor_ms, 2)} ms"
    ]
    for system, value in ratios.hybrid_over_floor.items():
        how = "interleaved, same process" if system in ratios.paired else "separate runs"
        timed = ratios.paired_p50s.get(system)
        both = "" if timed is None else f" ({timed[0]:.2f} / {timed[1]:.2f} ms)"
        lines.append(f"- {system} p50 / embedding p50 ({how}): {value:.2f}×{both}")
    how = "interleaved, same process" if ratios.keyword_paired else "separate runs"
    lines.append(
        f"- tandem-keyword p50 / tantivy p50 ({how}): {_fmt(ratios.keyword_over_tantivy, 2)}"
    )
    lines.append(
        f"- tandem-hybrid ingest (own encoding) / raw encoder: "
        f"{_fmt(ratios.ingest_over_encoder, 2)}"
    )
    for system, gain in (
        ("tandem-hybrid", ratios.hybrid_gain),
        ("tandem-hybrid-zscore", ratios.zscore_gain),
    ):
        if gain is not None or system == "tandem-hybrid":
            shown = "–" if gain is None else f"{gain:+.4f}"
            lines.append(f"- {system} nDCG@10 − best single arm: {shown}")
    return lines


def render_markdown(report: RunReport, header: dict[str, Any]) -> str:
    return render_results(report.results, report.floors, header)


def rerender_markdown(jsonl: Path) -> str:
    """A run's ``results.md`` again from its ``results.jsonl`` (``python -m bench render``:
    after the report's wording changed, the same figures in today's tables)."""
    rows = [json.loads(line) for line in jsonl.read_text("utf-8").splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{jsonl}: no results")
    floors: dict[str, CorpusFloor] = {}
    for row in rows:
        dataset = row.get("dataset") or {}
        floors.setdefault(
            row["corpus"],
            CorpusFloor(
                corpus=row["corpus"],
                p50_ms_by_backend=row.get("query_embedding_p50_ms") or {},
                vectors_from_cache=True,
                encoder_docs_per_s=row.get("encoder_docs_per_s"),
                dataset_path=dataset.get("path", ""),
                split=dataset.get("judgements", "test"),
                self_indexed_queries=dataset.get("self_indexed_queries", 0),
            ),
        )
    results = tuple(SystemResult.from_json(row) for row in rows)
    header = {key: rows[0][key] for key in ("revision", "timestamp", "machine", "config")}
    return render_results(results, tuple(floors.values()), header)


def render_results(
    results: Sequence[SystemResult], floors: Sequence[CorpusFloor], header: dict[str, Any]
) -> str:
    machine = header["machine"]
    config = header.get("config") or {}
    k_latency, k_quality = config.get("k_latency", 10), config.get("k_quality", 100)
    lines = [
        "# Benchmark results",
        "",
        f"revision `{header['revision']}`, {header['timestamp']}, "
        f"{machine['cpu']} ({machine['cores']} cores), Python {machine['python']}, "
        f"load average at the end {machine.get('load_average', '?')}",
        "",
        f"Latency: one query at a time, top-{k_latency}, p50/p95 over every judged query. "
        "Peak RSS: high-water mark of the process that ran only that system "
        f"(interpreter, libraries and model included). Quality: ir-measures, top-{k_quality} "
        "run. LanceDB and txtai size their fusion windows from the limit they are called "
        "with, so they are called with a limit of 100 whatever they are asked for, and "
        "their answer is cut to the depth asked: LanceDB fuses 100 candidates per arm, "
        "txtai 1,000 (its hybrid search asks each index for ten times its limit). Tandem "
        "and the glue are called with the depth asked and fuse fixed windows of 100 "
        "candidates per arm at any depth up to 100. Every hybrid system's top 10 is thus "
        "the head of its top 100, one configuration scored and timed.",
        "",
        "Ingest: the headline includes embedding the documents: every vector system, Tandem "
        "hybrid too, is charged its index time plus the corpus's embedding time at the raw "
        "encoder's rate (same model, sentence-transformers' default batch of 32), measured "
        "once on a sample spread over the corpus; index-only: the systems that take vectors "
        "are handed the cached ones. Tandem hybrid's own `Corpus.add` (embedding included) "
        "is also timed against the raw encoder, interleaved on the same sample, and given "
        "as a ratio below each table. Each system's library imports and model loads happen "
        "before its index is timed.",
    ]
    ratios = {f.corpus: compute_ratios(f, results) for f in floors}
    by_corpus = {f.corpus: f for f in floors}
    for corpus in _corpora(results):
        rows = [r for r in results if r.corpus == corpus]
        n_docs = max((r.n_docs for r in rows), default=0)
        n_queries = max((r.n_queries for r in rows), default=0)
        lines += ["", f"## {corpus} ({n_docs} docs, {n_queries} queries)", ""]
        lines += _judgement_lines(by_corpus.get(corpus))
        lines += [f"| {COLUMNS} |", "|" + "---|" * N_COLUMNS]
        lines += [_row(r) for r in rows]
        if corpus in ratios:
            lines += ["", *_ratio_lines(ratios[corpus])]
    lines += ["", *best_peer_table(results)]
    return "\n".join(lines) + "\n"


def _judgement_lines(floor: CorpusFloor | None) -> list[str]:
    """A note under a corpus heading when it is not scored the plain way."""
    if floor is None:
        return []
    notes = []
    if floor.split != "test":
        notes.append(f"Scored with the `{floor.split}` judgements (no test split).")
    if floor.self_indexed_queries:
        count = floor.self_indexed_queries
        which = "1 query is itself a document" if count == 1 else f"{count} queries are documents"
        notes.append(
            f"{which} of the corpus (same id, same text); as BEIR does, a query's own "
            "document is left out of its ranking."
        )
    return [" ".join(notes), ""] if notes else []


def best_peer_table(results: Sequence[SystemResult]) -> list[str]:
    """One row per corpus: each Tandem hybrid system, the best non-Tandem system by
    nDCG@10, the distance between them (positive: Tandem ahead) and, when both records
    carry per-query nDCG@10, a paired test of that distance (``bench.significance``)."""
    lines = [
        "## Tandem against the best peer (nDCG@10)",
        "",
        "| corpus | Tandem system | Tandem | best peer | peer | Tandem − peer "
        "| 95 % CI | p (paired) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for corpus in _corpora(results):
        ok = [
            r
            for r in results
            if r.corpus == corpus and r.status is Status.OK and r.ndcg_at_10 is not None
        ]
        peers = [r for r in ok if _is_peer(r.system)]
        ours = [r for r in ok if r.system.startswith("tandem-hybrid")]
        if not peers or not ours:
            continue
        best = max(peers, key=lambda r: (r.ndcg_at_10 or 0.0, r.system))
        for tandem in ours:
            gap = (tandem.ndcg_at_10 or 0.0) - (best.ndcg_at_10 or 0.0)
            lines.append(
                f"| {corpus} | {tandem.system} | {_fmt(tandem.ndcg_at_10, 4)} | {best.system} "
                f"| {_fmt(best.ndcg_at_10, 4)} | {gap:+.4f} | {_paired_cells(tandem, best)} |"
            )
    lines += ["", PAIRED_NOTE]
    return lines


PAIRED_NOTE = (
    "95 % CI and p (paired): Tandem and the peer paired on the same queries (per-query "
    f"nDCG@10 differences); CI: paired bootstrap of the mean difference ({RESAMPLES:,} "
    f"resamples), p: two-sided sign-flip randomization test ({PERMUTATIONS:,} permutations), "
    f"seeds fixed ({SEED}) so the figures reproduce. A difference whose CI contains 0 is not "
    "one this query set can tell apart. “–”: a record written without per-query scores."
)


def _paired_cells(ours: SystemResult, peer: SystemResult) -> str:
    """``95 % CI | p`` of ``ours - peer`` over their common queries, "–" without data."""
    if not ours.per_query_ndcg10 or not peer.per_query_ndcg10:
        return "– | –"
    try:
        test = paired_test(ours.per_query_ndcg10, peer.per_query_ndcg10)
    except ValueError:  # no query in common
        return "– | –"
    p = "< 0.001" if test.p_value < 0.001 else f"{test.p_value:.3f}"
    return f"[{test.ci_low:+.4f}, {test.ci_high:+.4f}] | {p}"


def _is_peer(system: str) -> bool:
    """A system the README compares Tandem with (``SystemSpec.peer``: the glue, LanceDB,
    txtai), not one of the single-library baselines (tantivy, FAISS, bm25s)."""
    try:
        return SPECS[SystemName.from_str(system)].peer
    except (KeyError, ValueError):
        return False


def _corpora(results: Sequence[SystemResult]) -> list[str]:
    seen: list[str] = []
    for r in results:
        if r.corpus not in seen:
            seen.append(r.corpus)
    return seen
