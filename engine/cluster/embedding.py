"""``EmbeddingWorker``: one embedding model, loaded once, in one Ray actor.

Ingest runs a pool of these on Ray Data (one CPU each, or one GPU each when the cluster
has GPUs); the benchmark runs them as plain actors to measure how embedding throughput
grows with workers. A worker on CPUs uses one intra-op thread per CPU Ray reserved for
it (Ray sets ``OMP_NUM_THREADS`` to match), so workers on one node do not oversubscribe it.

A worker's output is checked as a corpus checks its embedder's (``DimensionGuard``): rows
that are NaN, infinite or zero, too few rows, or rows of another length than the corpus's
vectors are ``InvalidOutput`` — an ``EmbedderUnavailable``, provider trouble — never
vectors a shard would refuse as bad input.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from dense import Embedder
from engine.cluster.shard import EmbedderFactory
from engine.config import EmbedderSpec, SentenceTransformerEmbedding
from engine.dimension_guard import DimensionGuard
from engine.embedders import build_embedder, with_passages


class EmbeddingWorker:
    """Embeds documents with the model ``spec`` names (or ``factory``'s embedder);
    ``dimension``: the length of the corpus's stored vectors (``None``: none stored yet),
    which every output must have."""

    def __init__(
        self,
        spec: EmbedderSpec,
        factory: EmbedderFactory | None = None,
        gpu: bool = False,
        dimension: int | None = None,
    ) -> None:
        self._expected = dimension
        model: Embedder
        if factory is None and isinstance(spec, SentenceTransformerEmbedding):
            from dense.local import SentenceTransformerEmbedder

            model = SentenceTransformerEmbedder(
                spec.model,
                device="cuda" if gpu else "cpu",
                onnx_queries=False,
                progress=False,
            )
            model = with_passages(spec, model)
            if not gpu:
                _limit_torch_threads()
        else:
            model = build_embedder(spec, factory)
        self._embedder = DimensionGuard(model, lambda: self._expected)

    @property
    def name(self) -> str:
        return self._embedder.name

    @property
    def dimension(self) -> int:
        return self._embedder.dimension

    @property
    def width(self) -> int:
        """The length its vectors must have: the corpus's, else the model's
        (``EmbedderUnavailable`` while neither is known and the provider is down)."""
        return self._expected if self._expected is not None else self._embedder.dimension

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit rows, one per text, in order (``EmbedderUnavailable`` on provider trouble,
        ``InvalidOutput`` — one too — for output no corpus can use)."""
        return self._embedder.embed(texts)

    def cpu_seconds(self) -> float:
        """CPU time this worker's process has used so far (every thread)."""
        return time.process_time()

    def warm_up(self) -> int:
        """Load the model now (so that load time stays out of a measurement)."""
        return int(self.embed(["warm up"]).shape[1])


def _limit_torch_threads() -> None:
    try:
        import torch
    except ImportError:
        return
    threads = int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
    torch.set_num_threads(max(1, threads))
