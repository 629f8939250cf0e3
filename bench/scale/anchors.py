"""Real MiniLM embeddings the realistic scale vectors are drawn around.

The *anchors* are the embeddings of every document of the shipped fixture
(``bench/fixtures/tandem-help``) and of the shared BEIR corpora found under the data
directory (SciFact, Cranfield, CISI), computed with the benchmark's model; the *queries*
are the embeddings of every query text those collections ship (``queries.full.jsonl``
where present). Document vectors go through the benchmark's ``VectorCache``; query
vectors are cached beside it under the same kind of key (model + corpus fingerprint), so
a scale run embeds nothing after the first.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.dataset import BeirDataset, load_beir
from bench.encoder import SentenceEncoder
from bench.errors import DatasetError
from bench.vector_cache import DEFAULT_CACHE_DIR, VectorCache

logger = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "tandem-help"
DEFAULT_DATA_DIR = Path("/work/shared/data")
SHARED_CORPORA = ("scifact", "cranfield", "cisi")
QUERY_FILES = ("queries.full.jsonl", "queries.jsonl")


@dataclass(frozen=True)
class Anchors:
    """Real document and query embeddings (unit rows), and where they came from."""

    documents: Vectors
    queries: Vectors
    sources: tuple[str, ...]  # corpus names, in the order their rows appear

    def __post_init__(self) -> None:
        if self.documents.ndim != 2 or self.documents.shape[0] < 2:
            raise ValueError("anchors need at least two document vectors")
        if self.queries.ndim != 2 or self.queries.shape[1] != self.documents.shape[1]:
            raise ValueError("query vectors must match the documents' dimension")


def corpus_folders(data_dir: Path | None = DEFAULT_DATA_DIR) -> list[Path]:
    """The fixture, then every shared corpus present under ``data_dir``."""
    folders = [FIXTURE]
    if data_dir is not None:
        folders += [data_dir / n for n in SHARED_CORPORA if (data_dir / n).is_dir()]
    return folders


def load_anchors(
    model: str,
    data_dir: Path | None = DEFAULT_DATA_DIR,
    cache_dir: Path = DEFAULT_CACHE_DIR,
    encoder: SentenceEncoder | None = None,
) -> Anchors:
    """Embed (or read from the cache) every anchor corpus and its queries."""
    encoder = encoder or SentenceEncoder(model)
    cache = VectorCache(cache_dir)
    docs: list[Vectors] = []
    queries: list[Vectors] = []
    names: list[str] = []
    for folder in corpus_folders(data_dir):
        try:
            dataset = load_beir(folder)
        except DatasetError as exc:
            logger.warning("skipping anchor corpus %s (%s)", folder, exc)
            continue
        vectors, _cached = cache.get_or_compute(encoder, dataset, progress=False)
        docs.append(vectors)
        queries.append(_query_vectors(encoder, dataset, folder, cache_dir))
        names.append(dataset.name)
    return Anchors(
        documents=_unit(np.vstack(docs)), queries=_unit(np.vstack(queries)), sources=tuple(names)
    )


def _query_texts(folder: Path) -> list[str]:
    for name in QUERY_FILES:
        path = folder / name
        if path.is_file():
            with path.open(encoding="utf-8") as handle:
                texts = [str(json.loads(line).get("text") or "") for line in handle if line.strip()]
            return [t for t in texts if t.strip()]
    return []


def _query_vectors(
    encoder: SentenceEncoder, dataset: BeirDataset, folder: Path, cache_dir: Path
) -> Vectors:
    texts = _query_texts(folder)
    key = hashlib.sha256(
        json.dumps([encoder.model, dataset.fingerprint, texts], sort_keys=True).encode()
    ).hexdigest()[:24]
    path = cache_dir / "queries" / f"{key}.npy"
    if path.is_file():
        cached = np.load(path)
        if cached.shape[0] == len(texts):
            return np.ascontiguousarray(cached, dtype=np.float32)
    vectors = encoder.encode(texts) if texts else np.zeros((0, encoder.dimension), np.float32)
    _save(path, vectors)
    return vectors


def _save(path: Path, array: Vectors) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npy.tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.save(handle, array)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _unit(rows: Sequence[Vectors] | Vectors) -> Vectors:
    array = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(array, axis=1, keepdims=True)
    return np.ascontiguousarray(array / np.maximum(norms, 1e-12), dtype=np.float32)
