"""``python -m bench cluster``: its report and its arguments (the run itself needs Ray and
the model; it is exercised by hand, see the README)."""

from __future__ import annotations

import pytest

from bench.cli import main
from bench.cluster import render_table


def test_report_marks_targets_met_and_missed() -> None:
    results = {
        "corpus": "tiny",
        "documents": 10,
        "queries": 2,
        "shards": 4,
        "revision": "abc",
        "load_avg_start": [1.0, 1.0, 1.0],
        "load_avg_end": [2.0, 1.0, 1.0],
        "cpus": 2,
        "model": "m",
        "keyword_ndcg10_delta": 0.0004,
        "p50_overhead_ms": 4.2,
        "lost_documents": 0,
    }
    table = render_table(results)
    assert "| keyword_ndcg10_delta | |Δ| ≤ 0.005 | 0.0004 | yes |" in table
    assert "| p50_overhead_ms | ≤ 3 ms | 4.2 | NO |" in table
    assert "| lost_documents | 0 | 0 | yes |" in table
    assert "load average 1.00 at start, 2.00 at end" in table
    assert "search_errors" not in table  # a stage that did not run reports nothing


def test_unknown_stage_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["cluster", "--stages", "quality,warp-drive"])
    assert exited.value.code == 2
    assert "warp-drive" in capsys.readouterr().err
