"""Command line: ``python -m bench [run options]``, ``python -m bench scale [options]`` and
``python -m bench processes [options]``."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.encoder import DEFAULT_MODEL, EncoderBackend
from bench.errors import BenchError
from bench.systems.base import SystemName
from bench.systems.registry import parse_systems
from bench.vector_cache import DEFAULT_CACHE_DIR

logger = logging.getLogger(__name__)


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Quality and speed of Tandem and its peers on BEIR-layout corpora. "
        "Without --data, runs on the fixture corpus shipped with bench. "
        "Subcommand: `python -m bench scale --help`.",
    )
    parser.add_argument(
        "--data",
        type=Path,
        nargs="+",
        action="extend",
        metavar="DIR",
        help="BEIR folders (corpus.jsonl[.gz], queries.jsonl, qrels/test.tsv)",
    )
    parser.add_argument(
        "--split",
        metavar="NAME",
        help="judgements to score with: qrels/NAME.tsv (default: test, or dev where a "
        "folder has no test judgements, as BEIR's MS MARCO)",
    )
    parser.add_argument(
        "--drop-titles",
        action="store_true",
        help="remove every document's title first (each corpus is reported as "
        "NAME-notitle): how the systems do on collections without titles",
    )
    parser.add_argument(
        "--systems",
        default="all",
        help="comma-separated systems (default: all): "
        + ", ".join(name.value for name in SystemName),
    )
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE_DIR,
        help="corpus-vector cache (default: %(default)s)",
    )
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="sentence-transformers model for every system (default: %(default)s)",
    )
    parser.add_argument(
        "--backend",
        choices=[b.value for b in EncoderBackend],
        help="query-encoding runtime for the raw arms and peers "
        "(default: the fastest measured for the floor)",
    )
    parser.add_argument(
        "--k-latency", type=int, default=10, help="top-k of the timed pass (default: %(default)s)"
    )
    parser.add_argument(
        "--k-quality",
        type=int,
        default=100,
        help="top-k of the scored pass (default: %(default)s, for Recall@100)",
    )
    parser.add_argument(
        "--encode-subset",
        type=int,
        default=500,
        help="docs for the Tandem-ingest vs raw-encoder comparison",
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="run systems in this process (faster; no per-system peak RSS)",
    )
    parser.add_argument("--no-progress", action="store_true")
    return parser


def _main_run(argv: Sequence[str]) -> int:
    from bench.run import FIXTURE_DIR, RunConfig, run_benchmark

    args = _run_parser().parse_args(argv)
    config = RunConfig(
        data_dirs=tuple(args.data) if args.data else (FIXTURE_DIR,),
        split=args.split,
        drop_titles=args.drop_titles,
        systems=parse_systems(args.systems),
        out_dir=args.out,
        cache_dir=args.cache,
        model=args.model,
        backend=EncoderBackend.from_str(args.backend) if args.backend else None,
        k_quality=args.k_quality,
        k_latency=args.k_latency,
        encode_subset=args.encode_subset,
        isolated=not args.in_process,
        progress=not args.no_progress,
    )
    report = run_benchmark(config)
    print((config.out_dir / "results.md").read_text(encoding="utf-8"))
    failed = [r for r in report.results if r.status.value == "error"]
    return 1 if failed else 0


def _scale_parser() -> argparse.ArgumentParser:
    from bench.scale.anchors import DEFAULT_DATA_DIR

    parser = argparse.ArgumentParser(
        prog="python -m bench scale",
        description="Cost against corpus size on synthetic corpora (Zipfian text; vectors "
        "drawn around real MiniLM embeddings with real query embeddings, or random unit "
        "vectors; fixed seed).",
    )
    parser.add_argument(
        "--docs",
        default="100000,1000000",
        help="comma-separated corpus sizes (default: %(default)s)",
    )
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path, default=Path("bench-results") / "scale")
    parser.add_argument(
        "--no-tandem", action="store_true", help="raw arms only (skip the Tandem corpora)"
    )
    parser.add_argument(
        "--no-keyword-corpus",
        action="store_true",
        help="Tandem stage: the hybrid corpus only (skip the keyword-only corpus)",
    )
    parser.add_argument(
        "--random-vectors",
        action="store_true",
        help="random unit vectors and queries instead of realistic ones (the old baseline)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="BEIR corpora whose embeddings anchor the realistic vectors, besides the "
        "shipped fixture (default: %(default)s)",
    )
    parser.add_argument(
        "--ef",
        default="64,256",
        help="efSearch values reported besides the engine's own (default: %(default)s)",
    )
    parser.add_argument("--no-progress", action="store_true")
    return parser


def _main_scale(argv: Sequence[str]) -> int:
    from bench.scale.run import ScaleConfig, run_scale

    args = _scale_parser().parse_args(argv)
    try:
        sizes = tuple(int(x) for x in args.docs.split(",") if x.strip())
    except ValueError as exc:
        raise ValueError(f"--docs must be comma-separated integers: {args.docs!r}") from exc
    config = ScaleConfig(
        sizes=sizes,
        n_queries=args.queries,
        seed=args.seed,
        model=args.model,
        out_dir=args.out,
        tandem=not args.no_tandem,
        keyword_corpus=not args.no_keyword_corpus,
        progress=not args.no_progress,
        realistic=not args.random_vectors,
        data_dir=args.data_dir,
        hnsw_ef_search=tuple(int(x) for x in args.ef.split(",") if x.strip()),
    )
    run_scale(config)
    print((config.out_dir / "scale.md").read_text(encoding="utf-8"))
    return 0


def _processes_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench processes",
        description="Several processes on one engine directory: throughput with 2 "
        "processes, p95 with c clients over 2 processes, visibility lag across processes, "
        "cost of the per-search change check.",
    )
    parser.add_argument("--data", type=Path, help="a BEIR folder (default: the fixture)")
    parser.add_argument("--out", type=Path, default=Path("bench-results") / "processes")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per load run")
    parser.add_argument("--rounds", type=int, default=2, help="1-then-2-process rounds")
    parser.add_argument("--no-hybrid", action="store_true", help="skip the real-model runs")
    parser.add_argument("--lag-documents", type=int, default=200)
    return parser


def _main_processes(argv: Sequence[str]) -> int:
    from bench.processes import ProcessesConfig, render_table, run_processes, write_result
    from bench.run import FIXTURE_DIR

    args = _processes_parser().parse_args(argv)
    config = ProcessesConfig(
        data_dir=args.data or FIXTURE_DIR,
        out_dir=args.out,
        duration_s=args.duration,
        rounds=args.rounds,
        hybrid=not args.no_hybrid,
        lag_documents=args.lag_documents,
    )
    result = run_processes(config)
    path = write_result(result, config)
    print(render_table(result))
    print(f"written: {path}")
    return 0


def _quiet_libraries() -> None:
    """Model-loading progress bars and library debug lines would drown the run's own
    progress; spawned workers inherit the environment variables."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.getLogger("bm25s").setLevel(logging.WARNING)


def _main_render(argv: Sequence[str]) -> int:
    """``python -m bench render DIR...``: each DIR's results.md again from its results.jsonl."""
    from bench.report import JSONL_NAME, MARKDOWN_NAME, rerender_markdown

    parser = argparse.ArgumentParser(
        prog="python -m bench render",
        description="Rewrite DIR/results.md from DIR/results.jsonl (the same figures, "
        "today's tables).",
    )
    parser.add_argument("dirs", nargs="+", type=Path, metavar="DIR")
    for directory in parser.parse_args(list(argv)).dirs:
        markdown = rerender_markdown(directory / JSONL_NAME)
        (directory / MARKDOWN_NAME).write_text(markdown, encoding="utf-8")
        print(f"wrote {directory / MARKDOWN_NAME}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _quiet_libraries()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args[:1] == ["scale"]:
            return _main_scale(args[1:])
        if args[:1] == ["passages"]:
            from bench.passages import main as main_passages  # `python -m bench passages -h`

            return main_passages(args[1:])
        if args[:1] == ["http"]:
            from bench.http import main as main_http  # `python -m bench http --help`

            return main_http(args[1:])
        if args[:1] == ["cluster"]:
            from bench.cluster import main_cluster

            return main_cluster(args[1:])
        if args[:1] == ["processes"]:
            return _main_processes(args[1:])
        if args[:1] == ["render"]:
            return _main_render(args[1:])
        return _main_run(args)
    except (BenchError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
