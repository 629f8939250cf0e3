"""Corpus embeddings computed once per (model, corpus) and kept on disk.

The key hashes the model name, the corpus file's SHA-256 (the dataset fingerprint), the
document count and the text recipe (``BenchDocument.full_text``), so a changed corpus or
model never reuses stale vectors. Files are written to a temporary name and renamed, so
an interrupted run leaves no half-written cache entry. Query vectors are never cached.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path

import numpy as np

from bench.dataset import BeirDataset
from bench.encoder import SentenceEncoder, Vectors

logger = logging.getLogger(__name__)

TEXT_RECIPE = "title\\ntext:v1"
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "tandem-bench"


def cache_key(model: str, dataset: BeirDataset) -> str:
    raw = json.dumps(
        [model, dataset.fingerprint, len(dataset.documents), TEXT_RECIPE], sort_keys=True
    )
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:24]


class VectorCache:
    """``<dir>/vectors/<key>.npy`` plus a JSON sidecar naming model, corpus and size."""

    def __init__(self, directory: Path = DEFAULT_CACHE_DIR) -> None:
        self.directory = directory

    def path_for(self, model: str, dataset: BeirDataset) -> Path:
        return self.directory / "vectors" / f"{cache_key(model, dataset)}.npy"

    def load(self, model: str, dataset: BeirDataset) -> Vectors | None:
        path = self.path_for(model, dataset)
        if not path.is_file():
            return None
        vectors = np.load(path)
        if vectors.shape[0] != len(dataset.documents):
            logger.warning("ignoring cache entry %s with %d rows", path.name, vectors.shape[0])
            return None
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def get_or_compute(
        self, encoder: SentenceEncoder, dataset: BeirDataset, progress: bool = True
    ) -> tuple[Vectors, bool]:
        """The corpus vectors and whether they came from the cache."""
        cached = self.load(encoder.model, dataset)
        if cached is not None:
            return cached, True
        texts = [doc.full_text for doc in dataset.documents]
        vectors = encoder.encode(texts, progress=progress)
        self._store(self.path_for(encoder.model, dataset), vectors, encoder.model, dataset)
        return vectors, False

    def store(self, model: str, dataset: BeirDataset, vectors: Vectors) -> None:
        """Keep ``vectors`` under ``model``'s key (any recipe name works as a model key)."""
        self._store(self.path_for(model, dataset), vectors, model, dataset)

    def _store(self, path: Path, vectors: Vectors, model: str, dataset: BeirDataset) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=path.parent, suffix=".npy.tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                np.save(handle, vectors)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp_name, path)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
        sidecar = {
            "model": model,
            "corpus": dataset.name,
            "fingerprint": dataset.fingerprint,
            "rows": int(vectors.shape[0]),
            "dim": int(vectors.shape[1]),
        }
        path.with_suffix(".json").write_text(json.dumps(sidecar, indent=2), encoding="utf-8")
