"""``python -m bench http``: the report renders every figure it was given (no server)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from bench.http.cli import main, median_round, render
from bench.http.server import floor_server


def test_render_reports_runs_overhead_scaling_and_fuzz() -> None:
    run = {
        "corpus": "kw",
        "requests": 100,
        "p95_ms": 2.0,
        "p99_ms": 3.0,
        "status_errors": 0,
        "socket_errors": 0,
        "loadavg_1m": 1.5,
    }
    result = {
        "revision": "abc",
        "timestamp": "t",
        "machine": "m",
        "python": "3.11",
        "loadavg_start": [1.0],
        "loadavg_end": [2.0],
        "note": "noisy",
        "options": {"duration_s": 5.0, "overhead_rounds": 3, "fuzz_examples": 400},
        "dataset": {"name": "d", "documents": 10, "queries": 5},
        "overhead": [
            {
                "corpus": "kw",
                "in_process_p50_ms": p,
                "http_p50_ms": h,
                "overhead_ms": h - p,
                "floor_p50_ms": 0.25,
            }
            for p, h in ((0.5, 1.25), (0.6, 1.0), (0.4, 1.5))
        ],
        "runs": [
            {**run, "workers": 1, "connections": 1, "qps": 500.0, "p50_ms": 1.25},
            {**run, "workers": 1, "connections": 4, "qps": 1000.0, "p50_ms": 3.0},
            {**run, "workers": 2, "connections": 4, "qps": 1800.0, "p50_ms": 2.0},
        ],
        "workers_skipped": [],
        "fuzz": {
            "operations": 15,
            "requests": 5000,
            "seconds": 60,
            "server_errors": 0,
            "private_leaks": 0,
            "writes_accepted_without_token": 0,
            "directory_unchanged": True,
            "schema_mismatches": 0,
            "by_status": {"200": 1},
        },
    }
    text = render(result)
    # the median round: in-process 0.5, HTTP 1.25, overhead 0.75 (0.4 .. 1.1 over rounds)
    assert "| kw | 3 | 0.50 | 1.25 | +0.75 (+0.40 .. +1.10) | 0.25 |" in text
    assert "wrk load runs of 5 s, 3 overhead rounds." in text
    assert "2 workers / 1 worker QPS, kw, 4 connections: 1.80×" in text
    assert "5000 requests" in text and "server errors 0" in text


def test_the_floor_app_answers_a_search_body_with_no_passages() -> None:
    with floor_server() as base:
        answer = httpx.post(base + "v1/corpora/any/search", json={"query": "q"}, timeout=60)
    assert answer.status_code == 200 and answer.json() == {"passages": []}


def _round(corpus: str, in_process: float, http: float, floor: float = 0.25) -> dict[str, object]:
    return {
        "corpus": corpus,
        "in_process_p50_ms": in_process,
        "http_p50_ms": http,
        "overhead_ms": http - in_process,
        "floor_p50_ms": floor,
    }


def test_the_overhead_row_is_one_round_whose_figures_subtract() -> None:
    """Medians taken column by column would show in-process 0.60 and HTTP 1.40 beside an
    overhead of 0.70; the row shows the median round instead: 1.00, 1.70, +0.70."""
    rounds = [_round("hy", 1.0, 1.7, 0.3), _round("hy", 0.4, 1.0), _round("hy", 0.6, 1.4)]
    assert median_round(rounds) is rounds[0]
    text = render(
        {
            "revision": "abc",
            "timestamp": "t",
            "machine": "m",
            "python": "3.11",
            "loadavg_start": [1.0],
            "loadavg_end": [1.0],
            "note": "noisy",
            "dataset": {"name": "d", "documents": 10, "queries": 5},
            "overhead": rounds,
            "runs": [
                {
                    "workers": 1,
                    "corpus": "hy",
                    "connections": 1,
                    "qps": 100.0,
                    "p50_ms": 1.0,
                    "p95_ms": 2.0,
                    "p99_ms": 3.0,
                    "status_errors": 0,
                    "socket_errors": 0,
                    "loadavg_1m": 1.0,
                }
            ],
        }
    )
    assert "| hy | 3 | 1.00 | 1.70 | +0.70 (+0.60 .. +0.80) | 0.30 |" in text


def test_an_even_number_of_rounds_shows_the_lower_middle_round() -> None:
    rounds = [_round("kw", 1.0, 1.0 + over) for over in (0.4, 0.1, 0.3, 0.2)]
    assert median_round(rounds) is rounds[3]  # overheads 0.1, 0.2 | 0.3, 0.4


def test_the_run_options_are_recorded(tmp_path: Path) -> None:
    """Nothing run (no load, no fuzz): http.json still says how the run was asked for."""
    out = tmp_path / "http"
    assert main(["--out", str(out), "--no-load", "--fuzz-examples", "0", "--duration", "2"]) == 0
    options = json.loads((out / "http.json").read_text())["options"]
    assert options["duration_s"] == 2.0 and options["fuzz_examples"] == 0
    assert options["overhead_rounds"] == 5 and options["load"] is False
