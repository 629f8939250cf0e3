"""Smoke test: ``python -m bench processes`` runs end to end on a tiny corpus and writes
every figure the issue asks for (values are the benchmark's business, not the test's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.processes import ProcessesConfig, render_table, run_processes, write_result


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_processes_bench_writes_every_figure(tiny_beir: Path, tmp_path: Path) -> None:
    config = ProcessesConfig(
        data_dir=tiny_beir,
        out_dir=tmp_path / "out",
        duration_s=0.3,
        rounds=1,
        clients=(2,),
        hybrid=False,
        lag_documents=3,
        lag_pause_s=0.01,
        overhead_blocks=2,
        work_dir=tmp_path,
    )
    result = run_processes(config, say=lambda _: None)
    data = json.loads(write_result(result, config).read_text())
    for key in (
        "keyword_qps_ratio_2p",
        "keyword_cpu_ratio_2p",
        "visibility_lag_p50_ms",
        "visibility_lag_p99_ms",
        "unchanged_search_overhead",
        "change_check_us",
    ):
        assert isinstance(data[key], (int, float)), key
    assert set(data["p95_over_bound"]) == {"2"}
    assert data["visibility_documents"] == 3 and data["visibility_missed"] == 0
    assert "load_average_before" in data["detail"] and data["revision"]
    assert "keyword_qps_ratio_2p" in render_table(result)
