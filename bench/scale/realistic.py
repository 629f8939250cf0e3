"""Realistic scale vectors: synthetic documents drawn around real MiniLM embeddings.

Random unit vectors have no neighbourhood structure (in 384 dimensions every pair is
nearly orthogonal), so approximate-search recall measured on them says nothing about a
corpus of real embeddings. Here every synthetic document vector is

    v = normalise(a + s · L z),   z ~ N(0, I)

where ``a`` is a real document embedding (an *anchor*, drawn uniformly from the fixture
and shared corpora), ``L Lᵀ`` is the covariance of the differences between real documents
and their ``NEIGHBOURS`` nearest real neighbours (so the noise varies along the directions
real neighbourhoods vary along, with their spectrum, rather than isotropically), and
``s`` scales it so that the noise is, on average, as long as the gap between a real
document and its nearest real neighbour (``SPREAD`` = 1). A synthetic vector therefore sits
as far from its anchor as real documents sit from their nearest neighbours, and the
vectors drawn around one anchor are about as similar to each other as real near-duplicate
topics are. Queries are real query embeddings, which are not anchors: their neighbours
are found, not planted. ``describe`` measures the result against the real collections.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bench.scale.anchors import Anchors

Vectors = npt.NDArray[np.float32]

NEIGHBOURS = 10
SPREAD = 0.8
CHUNK = 50_000


@dataclass(frozen=True)
class NoiseModel:
    """``L`` (``dim × dim``, noise = ``z @ L.T``) and the scale calibrated to real gaps."""

    transform: Vectors
    scale: float
    nn_cosine_median: float  # real documents: median cosine to their nearest neighbour


def exact_neighbours(matrix: Vectors, k: int, block: int = 4_096) -> npt.NDArray[np.int64]:
    """Each row's ``k`` nearest other rows by inner product (self excluded)."""
    n = matrix.shape[0]
    k = min(k, n - 1)
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, block):
        scores = matrix[start : start + block] @ matrix.T
        rows = np.arange(start, min(start + block, n))
        scores[rows - start, rows] = -np.inf
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, part, axis=1), axis=1, kind="stable")
        out[start : start + len(rows)] = np.take_along_axis(part, order, axis=1)
    return out


def noise_model(anchors: Anchors, spread: float = SPREAD) -> NoiseModel:
    docs = anchors.documents
    neighbours = exact_neighbours(docs, NEIGHBOURS)
    diffs = (docs[neighbours] - docs[:, None, :]).reshape(-1, docs.shape[1]).astype(np.float64)
    covariance = diffs.T @ diffs / diffs.shape[0]
    eigenvalues, eigenvectors = np.linalg.eigh(covariance)
    transform = eigenvectors * np.sqrt(np.clip(eigenvalues, 0.0, None))
    nearest = docs[neighbours[:, 0]]
    gap = float(np.mean(np.sum((nearest - docs) ** 2, axis=1)))  # E||a - nn(a)||²
    scale = spread * np.sqrt(gap / float(np.trace(covariance)))
    return NoiseModel(
        transform=np.ascontiguousarray(transform, dtype=np.float32),
        scale=float(scale),
        nn_cosine_median=float(np.median(np.sum(nearest * docs, axis=1))),
    )


def iter_vector_chunks(
    anchors: Anchors, model: NoiseModel, n_docs: int, seed: int, chunk: int = CHUNK
) -> Iterator[Vectors]:
    """The vectors of documents ``0 … n_docs-1`` in order, ``chunk`` rows at a time."""
    rng = np.random.default_rng(seed + 2)
    docs = anchors.documents
    dim = docs.shape[1]
    for start in range(0, n_docs, chunk):
        count = min(chunk, n_docs - start)
        picks = rng.integers(0, docs.shape[0], size=count)
        z = rng.standard_normal((count, dim), dtype=np.float32)
        block = docs[picks] + model.scale * (z @ model.transform.T)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        yield np.ascontiguousarray(block, dtype=np.float32)


def realistic_vectors(anchors: Anchors, model: NoiseModel, n_docs: int, seed: int) -> Vectors:
    out = np.empty((n_docs, anchors.documents.shape[1]), dtype=np.float32)
    start = 0
    for block in iter_vector_chunks(anchors, model, n_docs, seed):
        out[start : start + block.shape[0]] = block
        start += block.shape[0]
    return out


def real_queries(anchors: Anchors, n_queries: int, seed: int) -> Vectors:
    """``n_queries`` real query embeddings (sampled without replacement, then cycled)."""
    if n_queries < 1:
        raise ValueError(f"n_queries must be >= 1, got {n_queries}")
    rng = np.random.default_rng(seed + 4)
    order = rng.permutation(anchors.queries.shape[0])
    picks = np.resize(order, n_queries)
    return np.ascontiguousarray(anchors.queries[picks], dtype=np.float32)


def describe(
    anchors: Anchors, model: NoiseModel, truth_scores: npt.NDArray[np.float32]
) -> dict[str, float]:
    """How the synthetic neighbourhoods compare with the real ones (cosines, medians):
    real documents to their nearest real document; real queries to their 1st and 10th
    nearest real document; the same queries to their 1st and 10th synthetic neighbour
    (``truth_scores``: the exact top-10 scores of the benchmark's queries, best first)."""
    real = anchors.queries @ anchors.documents.T
    real.sort(axis=1)
    return {
        "real_doc_nn_cos": model.nn_cosine_median,
        "real_query_top1_cos": float(np.median(real[:, -1])),
        "real_query_top10_cos": float(np.median(real[:, -10])),
        "synthetic_query_top1_cos": float(np.median(truth_scores[:, 0])),
        "synthetic_query_top10_cos": float(np.median(truth_scores[:, -1])),
    }
