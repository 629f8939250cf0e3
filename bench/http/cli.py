"""``python -m bench http``: load (wrk) and fuzz (schemathesis) runs of ``tandem serve``.

Writes ``http.json`` (every figure, the run's options, the revision, the load average)
and ``http.md`` (the tables the README quotes) to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.dataset import dataset_record, load_beir
from bench.encoder import DEFAULT_MODEL
from bench.report import git_revision
from bench.vector_cache import DEFAULT_CACHE_DIR, VectorCache


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench http",
        description="tandem serve: keyword and hybrid search QPS and p50/p95 with wrk at "
        "1, 4 and 16 connections with 1 and 2 workers, against the in-process call; then "
        "a schemathesis fuzz from /openapi.json (no 5xx, no non-public document, no write "
        "without the token).",
    )
    parser.add_argument("--data", type=Path, help="a BEIR folder (default: the fixture)")
    parser.add_argument("--out", type=Path, default=Path("bench-results") / "http")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    parser.add_argument("--workers", default="1,2", help="worker counts (default: %(default)s)")
    parser.add_argument("--no-hybrid", action="store_true", help="keyword corpus only")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument(
        "--fuzz-examples",
        type=int,
        default=400,
        help="generated requests per operation (default: %(default)s; 0 skips the fuzz)",
    )
    parser.add_argument(
        "--overhead-rounds",
        type=int,
        default=5,
        help="paired in-process / HTTP rounds for the overhead figure (default: 5)",
    )
    parser.add_argument("--no-load", action="store_true", help="skip the wrk runs")
    return parser


def main(argv: Sequence[str]) -> int:
    from bench.http.fuzz import build_fuzz_engine, directory_counts, run_fuzz
    from bench.http.load import HYBRID, KEYWORD, as_dicts, load_runs, overhead_rounds
    from bench.http.server import build_engine, several_processes_allowed, tandem_serve
    from bench.run import FIXTURE_DIR

    args = _parser().parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "revision": git_revision(),
        "timestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "loadavg_start": list(os.getloadavg()),
        "options": {
            "duration_s": args.duration,
            "overhead_rounds": args.overhead_rounds,
            "fuzz_examples": args.fuzz_examples,
            "workers": args.workers,
            "hybrid": not args.no_hybrid,
            "load": not args.no_load,
            "model": args.model,
        },
        "note": "wrk, the server and the machine's other work share the same cores; "
        "latency figures are noisy (see the load averages)",
    }
    with tempfile.TemporaryDirectory(prefix="tandem-http-bench-") as tmp:
        if not args.no_load:
            dataset = load_beir(args.data or FIXTURE_DIR)
            queries = [q.text for q in dataset.queries]
            home = Path(tmp) / "engine"
            build_engine(
                home,
                dataset,
                hybrid=not args.no_hybrid,
                model=args.model,
                cache=VectorCache(args.cache),
            )
            corpora = [KEYWORD] if args.no_hybrid else [KEYWORD, HYBRID]
            wanted = [int(w) for w in args.workers.split(",") if w.strip()]
            many = several_processes_allowed(home)
            workers = [w for w in wanted if w == 1 or many]
            result["dataset"] = {
                **dataset_record(dataset, args.data or FIXTURE_DIR),
                "queries": len(queries),  # the judged ones, as cycled
            }
            result["workers_skipped"] = [w for w in wanted if w not in workers]
            result["overhead"] = as_dicts(
                overhead_rounds(home, queries, corpora, args.overhead_rounds, args.duration)
            )
            result["runs"] = as_dicts(load_runs(home, queries, corpora, workers, args.duration))
        if args.fuzz_examples > 0:
            fuzz_home = Path(tmp) / "fuzz"
            before = build_fuzz_engine(fuzz_home)
            # The server has a token; the fuzz never sends it (writes must answer 401).
            with tandem_serve(fuzz_home, token=secrets.token_urlsafe(32)) as base:
                report = run_fuzz(base, args.fuzz_examples)
            report.directory_unchanged = directory_counts(fuzz_home) == before
            result["fuzz"] = report.as_dict()
    result["loadavg_end"] = list(os.getloadavg())
    (args.out / "http.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    markdown = render(result)
    (args.out / "http.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    return 0


def _ratio(runs: list[dict[str, Any]], corpus: str, connections: int) -> float | None:
    one = [
        r for r in runs if (r["workers"], r["corpus"], r["connections"]) == (1, corpus, connections)
    ]
    two = [
        r for r in runs if (r["workers"], r["corpus"], r["connections"]) == (2, corpus, connections)
    ]
    if not one or not two or not one[0]["qps"]:
        return None
    return float(two[0]["qps"] / one[0]["qps"])


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose overhead is the median (the lower middle one of an even count), so
    its in-process and HTTP p50 subtract to the overhead shown beside them."""
    ordered = sorted(rounds, key=lambda r: float(r["overhead_ms"]))
    return ordered[(len(ordered) - 1) // 2]


def _overhead_table(rounds: list[dict[str, Any]]) -> list[str]:
    """The median round of each corpus (see ``bench.http.load.overhead_rounds``)."""
    lines = [
        "HTTP overhead, paired rounds (each: the queries through `Corpus.search` in the bench "
        "process, then through one wrk connection to a one-worker server on the same "
        "directory). Each row is the round whose overhead is the median (of an even number "
        "of rounds, the lower middle one): its in-process and HTTP p50 subtract to its "
        "overhead; min .. max over all rounds beside it.",
        "",
        "| corpus | rounds | in-process p50 ms | HTTP p50 ms | overhead ms, median round "
        "(min .. max) | floor: no-op app, p50 ms |",
        "|---|---|---|---|---|---|",
    ]
    for corpus in dict.fromkeys(r["corpus"] for r in rounds):
        mine = [r for r in rounds if r["corpus"] == corpus]
        over = [r["overhead_ms"] for r in mine]
        middle = median_round(mine)
        lines.append(
            f"| {corpus} | {len(mine)} | "
            f"{middle['in_process_p50_ms']:.2f} | "
            f"{middle['http_p50_ms']:.2f} | "
            f"{middle['overhead_ms']:+.2f} ({min(over):+.2f} .. {max(over):+.2f}) | "
            f"{middle.get('floor_p50_ms', 0.0):.2f} |"
        )
    lines += [
        "",
        "The floor is wrk against a no-op ASGI app on the same uvicorn set-up "
        "(`bench.http.floor_app`): what any request costs here before application code runs.",
    ]
    return lines


def render(result: dict[str, Any]) -> str:
    lines = [
        f"revision `{result['revision']}`, {result['timestamp']}, {result['machine']}, "
        f"Python {result['python']}, load average at start {result['loadavg_start']}, "
        f"at end {result['loadavg_end']}. {result['note']}.",
        "",
    ]
    runs: list[dict[str, Any]] = result.get("runs", [])
    options: dict[str, Any] = result.get("options", {})
    if runs:
        data = result["dataset"]
        lines += [
            f"Dataset {data['name']}: {data['documents']} documents, {data['queries']} queries "
            "cycled; top-10 search bodies POSTed by wrk on 127.0.0.1"
            + (
                f"; wrk load runs of {options['duration_s']:g} s, "
                f"{options['overhead_rounds']} overhead rounds."
                if options
                else "."
            ),
            "",
            "| workers | corpus | connections | QPS | p50 ms | p95 ms | p99 ms | errors "
            "| server: request / search / HTTP layer, mean ms | load 1m |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in runs:
            lines.append(
                f"| {r['workers']} | {r['corpus']} | {r['connections']} | {r['qps']:.0f} | "
                f"{r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {r['p99_ms']:.2f} | "
                f"{r['status_errors'] + r['socket_errors']} | "
                f"{r.get('server_request_ms', 0):.2f} / {r.get('server_search_ms', 0):.2f} / "
                f"{r.get('server_overhead_ms', 0):.2f} | {r['loadavg_1m']:.1f} |"
            )
        lines += ["", *_overhead_table(result.get("overhead", [])), ""]
        for connections in (4, 16):
            for corpus in ("kw", "hy"):
                ratio = _ratio(runs, corpus, connections)
                if ratio is not None:
                    lines.append(
                        f"- 2 workers / 1 worker QPS, {corpus}, {connections} connections: "
                        f"{ratio:.2f}×"
                    )
        if result.get("workers_skipped"):
            lines.append(
                f"- workers {result['workers_skipped']} skipped: this engine admits one process "
                "per directory"
            )
        lines.append("")
    fuzz = result.get("fuzz")
    if fuzz:
        lines += [
            f"Fuzz (schemathesis, {fuzz['operations']} operations, positive and negative "
            f"cases, no token): {fuzz['requests']} requests in {fuzz['seconds']} s; "
            f"server errors {fuzz['server_errors']}, non-public documents returned "
            f"{fuzz['private_leaks']}, writes accepted without the token "
            f"{fuzz['writes_accepted_without_token']}, directory unchanged "
            f"{fuzz['directory_unchanged']}, response-schema mismatches "
            f"{fuzz['schema_mismatches']}; statuses {fuzz['by_status']}.",
            "",
        ]
    return "\n".join(lines)
