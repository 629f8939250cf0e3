"""``python -m bench cluster``: its report and its arguments (the run itself needs Ray and
the model; it is exercised by hand, see the README)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench import cluster_faults
from bench.cli import main
from bench.cluster import ClusterBenchConfig, config_problem, render_table
from bench.cluster_measures import wait_until

RUN = {
    "corpus": "tiny",
    "documents": 10,
    "queries": 2,
    "shards": 4,
    "revision": "abc",
    "load_avg_start": [1.0, 1.0, 1.0],
    "load_avg_end": [2.0, 1.0, 1.0],
    "cpus": 2,
    "model": "m",
}
"""What every cluster result records about its run."""


def test_report_marks_targets_met_and_missed() -> None:
    results = {
        **RUN,
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


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--shards", "1"], "--shards >= 2"),
        (["--shards", "0", "--stages", "quality"], "--shards must be >= 1"),
        (["--loop-seconds", "0"], "--loop-seconds must be > 0"),
        (["--loop-seconds", "-5", "--stages", "capacity"], "--loop-seconds must be > 0"),
        (["--loop-seconds", "nan"], "--loop-seconds must be > 0"),
    ],
)
def test_options_that_cannot_run_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused while parsing, before Ray starts: one shard cannot lose a shard and keep
    answering, and a search loop of no length has no samples."""
    with pytest.raises(SystemExit) as exited:
        main(["cluster", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_one_shard_is_fine_without_the_faults_stage() -> None:
    assert config_problem(1, 20.0, frozenset({"quality", "latency"})) is None
    assert config_problem(1, 20.0, frozenset({"faults"})) is not None
    with pytest.raises(ValueError, match="shards"):
        ClusterBenchConfig(data_dir=Path("d"), out_dir=Path("o"), shards=1)


class _DeadShardCorpus:
    """Two shards, the second never answering ``shard_info``: the kill fails."""

    shards = 2
    name = "fake"

    def __len__(self) -> int:
        return 10

    def search(self, text: str, top_k: int) -> list[object]:
        return [object()]

    def shard_info(self) -> list[object | None]:
        return [object(), None]


def test_a_failed_kill_stops_the_search_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        cluster_faults, "time", SimpleNamespace(sleep=lambda _s: None, monotonic=time.monotonic)
    )
    corpus: Any = _DeadShardCorpus()
    with pytest.raises(RuntimeError, match="shard 1 did not answer"):
        cluster_faults.search_loop_with_kill(corpus, ["q"], 1.0)
    assert not [t for t in threading.enumerate() if t.name == "bench-search-loop"]


def test_the_search_loop_refuses_one_shard_and_no_duration() -> None:
    corpus: Any = _DeadShardCorpus()
    with pytest.raises(ValueError, match="seconds"):
        cluster_faults.search_loop_with_kill(corpus, ["q"], 0.0)
    corpus.shards = 1
    with pytest.raises(ValueError, match="2 shards"):
        cluster_faults.search_loop_with_kill(corpus, ["q"], 5.0)


def test_report_shows_the_dfs_cost_beside_its_own_baseline() -> None:
    results = {
        **RUN,
        "sharded_p50_ms": 9.0,
        "hybrid_dfs_baseline_p50_ms": 10.0,
        "hybrid_dfs_sharded_p50_ms": 10.5,
        "hybrid_dfs_p50_cost_ms": 0.5,
    }
    table = render_table(results)
    assert "| hybrid | 10.0 | 10.5 | 0.5 |" in table
    assert "| hybrid_dfs_p50_cost_ms |" not in table  # not also loose in the main table
    assert "| sharded_p50_ms | 9.0 |" in table


def test_wait_until_polls_until_done_or_the_timeout() -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    answers = iter([False, False, True])
    assert wait_until(lambda: next(answers), 60.0, 2.0, lambda: now[0], sleep)
    assert now[0] == 4.0
    now[0] = 0.0
    assert not wait_until(lambda: False, 5.0, 2.0, lambda: now[0], sleep)
    assert now[0] == 6.0  # asked at 0, 2, 4 and 6 s, then gave up
