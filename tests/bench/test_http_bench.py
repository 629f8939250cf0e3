"""``python -m bench http``: the report renders every figure it was given (no server)."""

from __future__ import annotations

import httpx

from bench.http.cli import render
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
    # medians over the paired rounds: in-process 0.5, HTTP 1.25, overhead 0.75 (0.4 .. 1.1)
    assert "| kw | 3 | 0.50 | 1.25 | +0.75 (+0.40 .. +1.10) | 0.25 |" in text
    assert "2 workers / 1 worker QPS, kw, 4 connections: 1.80×" in text
    assert "5000 requests" in text and "server errors 0" in text


def test_the_floor_app_answers_a_search_body_with_no_passages() -> None:
    with floor_server() as base:
        answer = httpx.post(base + "v1/corpora/any/search", json={"query": "q"}, timeout=60)
    assert answer.status_code == 200 and answer.json() == {"passages": []}
