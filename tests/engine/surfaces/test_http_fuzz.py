"""A small schemathesis run against the real ``tandem serve`` (the benchmark's fuzz,
``python -m bench http``, makes thousands of requests; this one makes a few per operation):
no 5xx, no non-public document in any answer, no write accepted without the token, and
the engine directory unchanged afterwards."""

from __future__ import annotations

import secrets
from pathlib import Path

from bench.http.fuzz import build_fuzz_engine, directory_counts, run_fuzz
from bench.http.server import tandem_serve

OPERATIONS = frozenset(
    {
        "POST /v1/corpora",
        "POST /v1/corpora/{name}/documents",
        "DELETE /v1/corpora/{name}",
        "POST /v1/memories",
        "POST /v1/corpora/{name}/search",
        "GET /v1/corpora/{name}/sources/{source_id}",
    }
)


def test_fuzz_from_the_openapi_schema_finds_no_5xx_leak_or_open_write(tmp_path: Path) -> None:
    home = tmp_path / "engine"
    before = build_fuzz_engine(home)
    with tandem_serve(home, token=secrets.token_urlsafe(32)) as base:
        # The writes, and the reads that could leak a non-public document.
        report = run_fuzz(base, examples_per_operation=4, only=OPERATIONS)
    assert report.operations == len(OPERATIONS)
    assert report.requests >= 15
    assert report.server_errors == [], report.server_errors[:5]
    assert report.private_leaks == [], report.private_leaks[:5]
    assert report.writes_accepted == [], report.writes_accepted[:5]
    assert report.by_status[401] > 0  # writes were tried, and refused for want of the token
    assert directory_counts(home) == before
