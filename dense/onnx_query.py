"""The fast query path: a sentence-transformers model exported once to ONNX Runtime.

A search embeds one short query, and that call is the floor of every hybrid search.
Running the same weights through ONNX Runtime, with the model's own fast tokenizer and
pooling done in numpy, skips most of the per-call overhead of torch.

Export (``export_onnx``) happens once per model, offline, from the already loaded torch
model: the transformer is traced with ``torch.onnx.export``, the tokenizer and a small
manifest (pooling, normalisation, max length, dimension) are written beside it, and the
export is verified against torch (cosine >= ``VERIFY_MIN_COSINE`` on probe texts) before
it is published. Publishing is an atomic directory rename, so a crash mid-export leaves
only a ``.tmp-*`` directory that is never read. Only plain
``[Transformer, Pooling(mean|cls), Normalize?]`` pipelines are exported; anything else
raises ``OnnxExportError`` and the caller stays on torch.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dense.contracts import DenseError

logger = logging.getLogger(__name__)

EXPORT_VERSION = 1
MANIFEST_NAME = "tandem-onnx.json"
VERIFY_MIN_COSINE = 0.9999
_ORT_ERROR_NAMES = (
    "Fail",
    "InvalidArgument",
    "NoSuchFile",
    "NoModel",
    "EngineError",
    "RuntimeException",
    "InvalidProtobuf",
    "ModelLoaded",
    "NotImplemented",
    "InvalidGraph",
    "EPFail",
)
# What ONNX Runtime raises when the model file itself is missing, cut short or not a
# model: only these (with ``OSError``) make an export worth deleting and redoing.
_ORT_FILE_ERROR_NAMES = (
    "NoSuchFile",
    "NoModel",
    "InvalidProtobuf",
    "InvalidGraph",
    "InvalidArgument",
)
_PROBES = ("a short query", "How do I reset my password?", "Vitamin D and tuberculosis risk")


class OnnxExportError(DenseError):
    """The model cannot be exported to, or loaded from, ONNX (the caller uses torch)."""


class OnnxExportUnreadable(OnnxExportError):
    """The export's own files are missing, unreadable or invalid: deleting and exporting
    again can help. Any other ``OnnxExportError`` on opening (no ONNX Runtime here, a
    session that will not start) says nothing against files other processes share."""


MAX_THREADS = 256
"""More intra-op threads than this is a typo, not a machine: 100,000 started ~22,000
threads and took 16 GB before the session opened."""


_PROCESS_LIMITS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN})


def _open_failure(directory: Path, exc: Exception, verb: str) -> OnnxExportError:
    """``OnnxExportUnreadable`` when the export's files are at fault — but not when this
    process ran out of descriptors or memory: that says nothing against files other
    processes share, which would be deleted and exported again."""
    message = f"cannot {verb} ONNX export at {directory}: {exc}"
    if isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno in _PROCESS_LIMITS):
        return OnnxExportError(message)
    return OnnxExportUnreadable(message)


def check_threads(threads: int | None) -> None:
    """``ValueError`` unless ``threads`` is ``None`` or an int in ``1..MAX_THREADS``."""
    if threads is not None and (
        not isinstance(threads, int) or isinstance(threads, bool) or not 1 <= threads <= MAX_THREADS
    ):
        raise ValueError(
            f"onnx_threads must be None or an int in 1..{MAX_THREADS}, got {threads!r}"
        )


@dataclass(frozen=True)
class OnnxManifest:
    dimension: int
    pooling: str  # "mean" or "cls"
    normalize: bool
    max_seq_length: int
    inputs: list[str]
    model_file: str
    export_version: int = EXPORT_VERSION


@functools.cache
def onnx_errors() -> tuple[type[Exception], ...]:
    """What opening or running an ONNX model may raise (ONNX Runtime's errors share no base)."""
    return (
        ImportError,
        OSError,
        ValueError,
        TypeError,
        RuntimeError,
        *_ort_errors(_ORT_ERROR_NAMES),
    )


@functools.cache
def _file_errors() -> tuple[type[Exception], ...]:
    """What opening a session raises when the model file is bad (``_ORT_FILE_ERROR_NAMES``)."""
    return (OSError, *_ort_errors(_ORT_FILE_ERROR_NAMES))


def _ort_errors(names: tuple[str, ...]) -> tuple[type[Exception], ...]:
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as state
    except ImportError:
        return ()
    errors = (getattr(state, name, None) for name in names)
    return tuple(e for e in errors if isinstance(e, type) and issubclass(e, Exception))


def cache_key(name: str, source: str, *, int8: bool) -> str:
    """A directory name for the export of model ``name`` loaded from ``source``.

    For a local directory the key covers every file's path, size and mtime, so new
    weights mean a new export; for a hub name it covers the name only.
    """
    digest = hashlib.sha256(f"v{EXPORT_VERSION}|int8={int8}|{source}".encode())
    root = Path(source)
    if root.is_dir():
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            stat = path.stat()
            digest.update(f"|{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(name).name or name)
    return f"{stem[:48]}-{'int8-' if int8 else ''}{digest.hexdigest()[:16]}"


class OnnxQueryEncoder:
    """Embeds texts with an exported model: tokenizer -> ONNX Runtime -> pooling.

    Thread-safe (ONNX Runtime sessions and fast tokenizers allow concurrent calls).
    """

    def __init__(self, directory: Path, *, threads: int | None = None) -> None:
        check_threads(threads)
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:  # this environment's fault, not the export's
            raise OnnxExportError(f"cannot open ONNX export at {directory}: {exc}") from exc
        try:
            raw = json.loads((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
            self.manifest = OnnxManifest(**raw)
            if self.manifest.export_version != EXPORT_VERSION:
                raise OnnxExportUnreadable(f"export version {self.manifest.export_version}")
            self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        except OnnxExportUnreadable:
            raise
        except Exception as exc:  # tokenizers raises a bare Exception for a bad file
            raise _open_failure(directory, exc, "read") from exc
        try:
            options = ort.SessionOptions()
            options.log_severity_level = 3
            # Idle intra-op threads sleep instead of spinning: a spinning pool burns the
            # core another process's (or thread's) search needs (12 vs 15 ms of CPU per
            # query at the same latency, measured on two cores).
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            if threads is not None:
                options.intra_op_num_threads = threads
            self._session = ort.InferenceSession(
                str(directory / self.manifest.model_file),
                options,
                providers=["CPUExecutionProvider"],
            )
        except _file_errors() as exc:
            raise _open_failure(directory, exc, "open") from exc
        except onnx_errors() as exc:
            raise OnnxExportError(f"cannot open ONNX export at {directory}: {exc}") from exc
        pad = self._tokenizer.padding or {}
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(self.manifest.max_seq_length)
        self._padded = Tokenizer.from_str(self._tokenizer.to_str())  # batches only
        self._padded.enable_padding(
            pad_id=pad.get("pad_id", 0), pad_token=pad.get("pad_token", "[PAD]")
        )
        self._output = [self._session.get_outputs()[0].name]
        self._mean = self.manifest.pooling == "mean"

    @property
    def dimension(self) -> int:
        return self.manifest.dimension

    def embed_one(
        self, text: str, before_run: Callable[[], object] | None = None
    ) -> npt.NDArray[np.float32]:
        """One text -> a (1, dimension) float32 row; the lean query path (no padding).
        ``before_run`` is called once, right before the model runs (see
        ``dense.QueryEmbedder``)."""
        enc = self._tokenizer.encode(text)
        ids = np.array([enc.ids], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
        if "token_type_ids" in self.manifest.inputs:
            feed["token_type_ids"] = np.array([enc.type_ids], dtype=np.int64)
        if before_run is not None:
            before_run()
        hidden = self._session.run(self._output, feed)[0][0]
        vector = hidden.mean(axis=0) if self._mean else hidden[0]
        return self._finish(vector.reshape(1, -1))

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Any number of texts (padded per call) -> (n, dimension) float32."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        encs = self._padded.encode_batch(list(texts))
        mask = np.array([e.attention_mask for e in encs], dtype=np.int64)
        feed = {
            "input_ids": np.array([e.ids for e in encs], dtype=np.int64),
            "attention_mask": mask,
        }
        if "token_type_ids" in self.manifest.inputs:
            feed["token_type_ids"] = np.array([e.type_ids for e in encs], dtype=np.int64)
        hidden = self._session.run(self._output, feed)[0]
        if self._mean:
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        else:
            pooled = hidden[:, 0]
        return self._finish(pooled)

    def _finish(self, rows: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
        rows = rows.astype(np.float32, copy=False)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return np.ascontiguousarray(rows / np.maximum(norms, 1e-12), dtype=np.float32)


def export_onnx(model: Any, directory: Path, *, int8: bool = False) -> None:
    """Export a loaded ``SentenceTransformer`` into ``directory`` (atomic, verified).

    Raises ``OnnxExportError`` if the pipeline is unsupported, tracing fails, or the
    exported model does not reproduce torch's vectors.
    """
    manifest = _describe(model, int8=int8)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".tmp-{directory.name}-"))
    try:
        _trace(model, tmp / "model.onnx", manifest.inputs)
        if int8:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(
                tmp / "model.onnx", tmp / manifest.model_file, weight_type=QuantType.QInt8
            )
        model.tokenizer.save_pretrained(str(tmp))
        if not (tmp / "tokenizer.json").is_file():
            raise OnnxExportError("the model has no fast tokenizer (tokenizer.json)")
        (tmp / MANIFEST_NAME).write_text(json.dumps(asdict(manifest)), encoding="utf-8")
        if not int8:
            _verify(model, OnnxQueryEncoder(tmp))
        for path in tmp.iterdir():
            _fsync(path)
        try:
            os.rename(tmp, directory)
        except OSError:
            if not (directory / MANIFEST_NAME).is_file():  # lost a race: theirs is fine
                raise
        _fsync(directory.parent)
    except OnnxExportError:
        raise
    except onnx_errors() as exc:
        raise OnnxExportError(f"ONNX export failed: {exc}") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _describe(model: Any, *, int8: bool) -> OnnxManifest:
    modules = list(model)
    kinds = [type(m).__name__ for m in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or len(modules) > 3:
        raise OnnxExportError(f"unsupported pipeline {kinds}")
    normalize = len(modules) == 3
    if normalize and kinds[2] != "Normalize":
        raise OnnxExportError(f"unsupported pipeline {kinds}")
    config = modules[1].get_config_dict()
    pooling = config.get("pooling_mode") or (
        "mean"
        if config.get("pooling_mode_mean_tokens")
        else "cls"
        if config.get("pooling_mode_cls_token")
        else "other"
    )
    if pooling not in ("mean", "cls"):
        raise OnnxExportError(f"unsupported pooling {pooling!r}")
    probe = model.tokenizer(["probe"], return_tensors="pt")
    inputs = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in probe]
    return OnnxManifest(
        dimension=embedding_dimension(model),
        pooling=pooling,
        normalize=normalize,
        max_seq_length=int(model.max_seq_length),
        inputs=inputs,
        model_file="model.int8.onnx" if int8 else "model.onnx",
    )


def embedding_dimension(model: Any) -> int:
    """The output dimension of a ``SentenceTransformer`` (method renamed in v5)."""
    getter = (
        getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    )
    return int(getter())


def _trace(model: Any, path: Path, inputs: list[str]) -> None:
    import torch

    class _Hidden(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return self.inner(**dict(zip(inputs, args, strict=True))).last_hidden_state

    probe = model.tokenizer(
        ["probe text", "a second, longer probe text"], padding=True, return_tensors="pt"
    )
    axes = {name: {0: "batch", 1: "sequence"} for name in [*inputs, "last_hidden_state"]}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer chatter about constant shapes
        torch.onnx.export(
            _Hidden(model[0].auto_model).eval(),
            tuple(probe[name] for name in inputs),
            str(path),
            input_names=inputs,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


def _verify(model: Any, encoder: OnnxQueryEncoder) -> None:
    reference = model.encode(list(_PROBES), normalize_embeddings=True, show_progress_bar=False)
    for text, ref in zip(_PROBES, reference, strict=True):
        cosine = float(encoder.embed_one(text)[0] @ ref)
        if cosine < VERIFY_MIN_COSINE:
            raise OnnxExportError(f"exported model disagrees with torch (cosine {cosine:.6f})")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
