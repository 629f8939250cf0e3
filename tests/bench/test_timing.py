"""Latency statistics, peak-memory reading and on-disk sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.timing import (
    LatencyStats,
    current_rss_bytes,
    dir_size_bytes,
    peak_rss_bytes,
    time_calls,
    time_interleaved,
)


def test_latency_stats_from_known_samples() -> None:
    stats = LatencyStats.from_seconds([0.001, 0.002, 0.003, 0.004, 0.010])
    assert stats.count == 5
    assert stats.p50_ms == pytest.approx(3.0)
    assert stats.p95_ms == pytest.approx(8.8)  # numpy linear interpolation: 4 + 0.8 * 6
    assert stats.mean_ms == pytest.approx(4.0)
    assert stats.qps == pytest.approx(5 / 0.020)


def test_latency_stats_needs_samples() -> None:
    with pytest.raises(ValueError):
        LatencyStats.from_seconds([])


def test_time_calls_calls_once_per_input_in_order() -> None:
    seen: list[str] = []
    samples = time_calls(seen.append, ["a", "b", "c"])
    assert seen == ["a", "b", "c"]
    assert len(samples) == 3 and all(s >= 0 for s in samples)


def test_peak_rss_is_at_least_current_rss() -> None:
    current = current_rss_bytes()
    assert current > 0
    assert peak_rss_bytes() >= current


def test_dir_size_counts_regular_files_recursively(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x" * 10)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b").write_bytes(b"y" * 5)
    assert dir_size_bytes(tmp_path) == 15
    assert dir_size_bytes(tmp_path / "a") == 10
    assert dir_size_bytes(tmp_path / "missing") == 0


def test_time_interleaved_alternates_in_blocks() -> None:
    calls: list[str] = []
    a, b = time_interleaved(
        lambda x: calls.append(f"a{x}"), lambda x: calls.append(f"b{x}"), "12345", block=2
    )
    assert calls == ["a1", "a2", "b1", "b2", "a3", "a4", "b3", "b4", "a5", "b5"]
    assert len(a) == len(b) == 5
    with pytest.raises(ValueError):
        time_interleaved(str, str, "x", block=0)


def test_time_interleaved_passes_swap_the_lead_and_keep_every_sample() -> None:
    calls: list[str] = []
    a, b = time_interleaved(
        lambda x: calls.append(f"a{x}"),
        lambda x: calls.append(f"b{x}"),
        "123",
        block=2,
        passes=3,
    )
    one = ["a1", "a2", "b1", "b2", "a3", "b3"]
    swapped = ["b1", "b2", "a1", "a2", "b3", "a3"]
    assert calls == one + swapped + one
    assert len(a) == len(b) == 9
    with pytest.raises(ValueError):
        time_interleaved(str, str, "x", passes=0)
