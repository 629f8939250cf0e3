"""Latency statistics and memory readings, shared by every measurement in a run."""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """Single-query latency over ``count`` calls issued one at a time (milliseconds)."""

    count: int
    p50_ms: float
    p95_ms: float
    mean_ms: float
    qps: float

    @classmethod
    def from_seconds(cls, samples: Sequence[float]) -> LatencyStats:
        if not samples:
            raise ValueError("no latency samples")
        values = np.asarray(samples, dtype=np.float64) * 1000.0
        total_s = float(values.sum()) / 1000.0
        return cls(
            count=len(values),
            p50_ms=float(np.percentile(values, 50)),
            p95_ms=float(np.percentile(values, 95)),
            mean_ms=float(values.mean()),
            qps=len(values) / total_s if total_s > 0 else float("inf"),
        )


def time_calls(fn: Callable[[str], object], inputs: Sequence[str]) -> list[float]:
    """Wall-clock seconds of ``fn(x)`` for each input, one call at a time."""
    samples: list[float] = []
    for item in inputs:
        start = time.perf_counter()
        fn(item)
        samples.append(time.perf_counter() - start)
    return samples


def time_interleaved(
    first: Callable[[str], object],
    second: Callable[[str], object],
    inputs: Sequence[str],
    block: int = 25,
    passes: int = 1,
) -> tuple[list[float], list[float]]:
    """Time ``first`` and ``second`` over the same inputs, alternating in blocks.

    Blocks of ``block`` inputs (``first`` over the block, then ``second`` over it) put
    both series under the same machine load within seconds of each other, so their ratio
    survives a busy machine; whole blocks rather than single calls keep each function's
    caches warm (strict call-by-call alternation slowed both sides by ~35% here).
    ``passes`` > 1 goes over the inputs that many times, ``second`` leading the blocks of
    every other pass (whichever runs first in a block may pay for the other's cache
    evictions), and returns every sample: sub-millisecond medians of one pass over a few
    hundred queries moved by a quarter between runs a minute apart.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    if passes < 1:
        raise ValueError(f"passes must be >= 1, got {passes}")
    a: list[float] = []
    b: list[float] = []
    pairs = ((first, a), (second, b))
    for turn in range(passes):
        order = pairs if turn % 2 == 0 else pairs[::-1]
        for start in range(0, len(inputs), block):
            chunk = inputs[start : start + block]
            for function, samples in order:
                samples.extend(time_calls(function, chunk))
    return a, b


def peak_rss_bytes() -> int:
    """High-water resident set size of this process.

    On Linux this is ``VmHWM`` from ``/proc/self/status``, which starts afresh at
    ``exec``; ``getrusage``'s ``ru_maxrss`` would carry over the parent's RSS into a
    spawned worker (it survives ``execve``), overstating every system's memory.
    """
    try:
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024


def current_rss_bytes() -> int:
    """Resident set size of this process right now."""
    import psutil

    return int(psutil.Process(os.getpid()).memory_info().rss)


def dir_size_bytes(path: Path) -> int:
    """Total size of the regular files under ``path`` (0 if it does not exist)."""
    if path.is_file():
        return path.stat().st_size
    if not path.is_dir():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
