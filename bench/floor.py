"""The query-embedding floor: single-query encode p50 per runtime, measured in the run."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from bench.encoder import EncoderBackend, SentenceEncoder
from bench.errors import BenchError
from bench.runner import WARMUP_QUERIES
from bench.timing import LatencyStats, time_calls

logger = logging.getLogger(__name__)


def measure_floor(
    model: str,
    backends: Sequence[EncoderBackend],
    queries: Sequence[str],
    cache_dir: Path,
    loaded: dict[EncoderBackend, SentenceEncoder] | None = None,
) -> dict[str, float]:
    """p50 (ms) of ``encode_query`` over every query, one at a time, per runtime that loads.

    A runtime that cannot load here (e.g. ONNX Runtime not installed) is left out, with a
    warning; ``loaded`` lets the caller reuse encoders it already holds.
    """
    out: dict[str, float] = {}
    for backend in backends:
        encoder = (loaded or {}).get(backend) or SentenceEncoder(
            model, backend, onnx_cache=cache_dir / "onnx"
        )
        try:
            encoder.load()
        except BenchError as exc:
            logger.warning("query-embedding floor: %s runtime skipped (%s)", backend.value, exc)
            continue
        for text in WARMUP_QUERIES:
            encoder.encode_query(text)
        stats = LatencyStats.from_seconds(time_calls(encoder.encode_query, queries))
        out[backend.value] = stats.p50_ms
    return out


def fastest_backend(p50_by_backend: dict[str, float]) -> EncoderBackend:
    """The runtime with the lowest p50 (torch when nothing was measured)."""
    if not p50_by_backend:
        return EncoderBackend.TORCH
    return EncoderBackend(min(p50_by_backend, key=p50_by_backend.__getitem__))
