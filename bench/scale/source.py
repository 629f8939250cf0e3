"""The vectors of one scale point: realistic (drawn around real MiniLM embeddings, real
queries; see ``bench.scale.realistic``) or random unit vectors (the old baseline)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.scale import realistic, synth
from bench.scale.anchors import Anchors, load_anchors

Vectors = npt.NDArray[np.float32]
CHUNK = realistic.CHUNK


@dataclass(frozen=True)
class VectorSource:
    n_docs: int
    seed: int
    anchors: Anchors | None = None  # None: random unit vectors
    noise: realistic.NoiseModel | None = None

    @property
    def realistic(self) -> bool:
        return self.anchors is not None

    @property
    def dimension(self) -> int:
        return synth.DIMENSION if self.anchors is None else int(self.anchors.documents.shape[1])

    def chunks(self) -> Iterator[Vectors]:
        """Document vectors ``0 … n_docs-1`` in ``CHUNK``-row pieces (bounded memory)."""
        if self.anchors is None or self.noise is None:
            matrix = synth.vectors(synth.make_corpus(self.n_docs, self.seed), self.dimension)
            for start in range(0, self.n_docs, CHUNK):
                yield matrix[start : start + CHUNK]
            return
        yield from realistic.iter_vector_chunks(self.anchors, self.noise, self.n_docs, self.seed)

    def matrix(self) -> Vectors:
        out = np.empty((self.n_docs, self.dimension), dtype=np.float32)
        start = 0
        for block in self.chunks():
            out[start : start + block.shape[0]] = block
            start += block.shape[0]
        return out

    def queries(self, n_queries: int) -> Vectors:
        if self.anchors is None:
            return synth.query_vectors(n_queries, self.seed, self.dimension)
        return realistic.real_queries(self.anchors, n_queries, self.seed)

    def describe(self, truth_scores: npt.NDArray[np.float32]) -> dict[str, float]:
        if self.anchors is None or self.noise is None:
            return {}
        return realistic.describe(self.anchors, self.noise, truth_scores)


def vector_source(
    n_docs: int,
    seed: int,
    model: str,
    realistic_vectors: bool,
    data_dir: Path | None,
    noise_cache: Path | None = None,
) -> VectorSource:
    """The scale point's vectors; ``noise_cache`` keeps the noise model between the
    stages of one point (each runs in its own process)."""
    if not realistic_vectors:
        return VectorSource(n_docs, seed)
    anchors = load_anchors(model, data_dir)
    if noise_cache is not None and noise_cache.is_file():
        with np.load(noise_cache) as saved:
            noise = realistic.NoiseModel(
                transform=saved["transform"],
                scale=float(saved["scale"]),
                nn_cosine_median=float(saved["nn_cosine_median"]),
            )
    else:
        noise = realistic.noise_model(anchors)
        if noise_cache is not None:
            np.savez(
                noise_cache,
                transform=noise.transform,
                scale=noise.scale,
                nn_cosine_median=noise.nn_cosine_median,
            )
    return VectorSource(n_docs, seed, anchors, noise)


def exact_top(
    matrix: Vectors, queries: Vectors, k: int, block: int = 25
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Exact top-``k`` rows and scores per query by inner product (the ground truth)."""
    labels = np.empty((queries.shape[0], k), dtype=np.int64)
    scores = np.empty((queries.shape[0], k), dtype=np.float32)
    for start in range(0, queries.shape[0], block):
        s = queries[start : start + block] @ matrix.T
        part = np.argpartition(-s, k - 1, axis=1)[:, :k]
        top = np.take_along_axis(s, part, axis=1)
        order = np.argsort(-top, axis=1, kind="stable")
        labels[start : start + block] = np.take_along_axis(part, order, axis=1)
        scores[start : start + block] = np.take_along_axis(top, order, axis=1)
    return labels, scores
