"""A lean ONNX Runtime path for single queries, independent of Tandem's own.

The floor of every hybrid search is embedding one query. To measure that floor fairly,
bench runs the same weights the cheapest way it knows: the transformer exported once with
``torch.onnx.export`` (opset 17, dynamic batch and sequence axes) into the cache, the
model's fast tokenizer (``tokenizers``), mean or CLS pooling and L2 normalisation in numpy.
An export is checked against sentence-transformers (cosine >= ``MIN_COSINE``) before use.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.encoder import embedding_dimension
from bench.errors import BenchError

MIN_COSINE = 0.9999
MANIFEST = "bench-onnx.json"
_PROBES = ("a short query", "How do I reset my password?", "Vitamin D and tuberculosis risk")


class OnnxRunner:
    """tokenizer → ONNX Runtime → pooling → unit rows."""

    def __init__(self, directory: Path) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
        self.dimension = int(manifest["dimension"])
        self._inputs: list[str] = list(manifest["inputs"])
        self._mean = manifest["pooling"] == "mean"
        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self._tokenizer.enable_truncation(int(manifest["max_seq_length"]))
        self._tokenizer.no_padding()
        options = ort.SessionOptions()
        options.log_severity_level = 3
        self._session = ort.InferenceSession(
            str(directory / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )

    def encode_one(self, text: str) -> npt.NDArray[np.float32]:
        enc = self._tokenizer.encode(text)
        ids = np.asarray([enc.ids], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.asarray([enc.type_ids], dtype=np.int64)
        hidden = self._session.run(None, feeds)[0][0]
        vector = hidden.mean(axis=0) if self._mean else hidden[0]
        return _unit(vector.reshape(1, -1))

    def encode(self, texts: list[str]) -> npt.NDArray[np.float32]:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.vstack([self.encode_one(t) for t in texts])


def _unit(rows: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    rows = rows.astype(np.float32, copy=False)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.ascontiguousarray(rows / np.maximum(norms, 1e-12), dtype=np.float32)


def load_or_export(torch_model: Callable[[], Any], directory: Path) -> OnnxRunner:
    """Open the export in ``directory``; without one, first create it from the
    sentence-transformers model ``torch_model()`` returns (written to a temporary
    directory, verified, then renamed). The model is asked for only then: a process that
    only opens an export never loads torch."""
    if not (directory / MANIFEST).is_file():
        _export(torch_model(), directory)
    return OnnxRunner(directory)


def _export(model: Any, directory: Path) -> None:
    import torch

    modules = list(model)
    pooling_config = modules[1].get_config_dict() if len(modules) > 1 else {}
    mean = bool(
        pooling_config.get("pooling_mode_mean_tokens")
        or pooling_config.get("pooling_mode") == "mean"
    )
    probe = model.tokenizer(
        ["probe text", "a longer second probe"], padding=True, return_tensors="pt"
    )
    inputs = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in probe]
    transformer = modules[0].auto_model

    class _Hidden(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = transformer

        def forward(self, *args: Any) -> Any:
            return self.inner(**dict(zip(inputs, args, strict=True))).last_hidden_state

    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".tmp-{directory.name}-"))
    try:
        axes = {name: {0: "batch", 1: "sequence"} for name in [*inputs, "hidden"]}
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                _Hidden().eval(),
                tuple(probe[name] for name in inputs),
                str(tmp / "model.onnx"),
                input_names=inputs,
                output_names=["hidden"],
                dynamic_axes=axes,
                opset_version=17,
                dynamo=False,
            )
        model.tokenizer.save_pretrained(str(tmp))
        manifest = {
            "dimension": embedding_dimension(model),
            "pooling": "mean" if mean else "cls",
            "max_seq_length": int(model.max_seq_length),
            "inputs": inputs,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
        _verify(model, OnnxRunner(tmp))
        if not directory.exists():  # else another process published an export first
            os.replace(tmp, directory)
    except BenchError:
        raise
    except Exception as exc:  # torch/onnx export raise many unrelated types
        raise BenchError(f"ONNX export failed: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _verify(model: Any, runner: OnnxRunner) -> None:
    reference = model.encode(list(_PROBES), normalize_embeddings=True, show_progress_bar=False)
    for text, ref in zip(_PROBES, reference, strict=True):
        cosine = float(runner.encode_one(text)[0] @ ref)
        if cosine < MIN_COSINE:
            raise BenchError(f"ONNX export disagrees with torch (cosine {cosine:.6f})")
