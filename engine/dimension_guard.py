"""A corpus's view of its embedder: every output is checked before it is stored or searched.

A provider can change under a corpus between runs (an Ollama model re-pulled under the
same name, a server swapped): a fresh embedder then learns the new dimension as if it
were right, and its vectors would break the FAISS index. A provider can also answer
with garbage — NaN or infinite values (a flaky GPU, a bad model reload), all-zero rows,
fewer rows than texts, a 1-D array. Committed to the store, such vectors would be
rejected by the vector index on every later open (a corpus that no longer opens); used
as a query, they would fail the search. Through this guard any such output is provider
trouble like any other — ``EmbedderUnavailable`` — so a document is stored degraded
(and healed by ``repair`` once the provider answers properly) and a query answers from
keyword search. Changing a corpus's model on purpose is ``SearchEngine.switch_embedder``.

The check is cheap next to the model call: ``np.isfinite`` over the batch and each row's
squared length (in float64, without a copy); the rows are returned as they came, as
float32 (the vector index normalises them).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import NoReturn

import numpy as np
import numpy.typing as npt

from dense import Embedder, EmbedderUnavailable, QueryEmbedder
from dense.wrapped import WrappedEmbedder

logger = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]

# The vector index (``dense``'s ``unit_rows``) refuses a row whose float64 length is at
# most 1e-12: so does this guard, so nothing it passes is refused there.
_MIN_SQUARED_NORM = 1e-24


class InvalidOutput(EmbedderUnavailable):
    """The provider answered, but with output no corpus can use; ``kind`` names the
    fault for logs (the message says what was wrong, never the texts)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def checked_output(vectors: object, rows: int, dimension: int | None) -> Vectors:
    """``vectors`` as float32 if they are ``rows`` finite, non-zero rows of ``dimension``
    values (``None``: any one width), else ``InvalidOutput``."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is checked below
            array = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidOutput(
            "type", f"embedder returned no numeric array ({type(exc).__name__})"
        ) from exc
    if array.ndim != 2 or array.shape[0] != rows:
        raise InvalidOutput(
            "shape", f"embedder returned shape {array.shape} for {rows} texts, not ({rows}, dim)"
        )
    if not rows:
        return array
    if dimension is not None and array.shape[1] != dimension:
        raise InvalidOutput(
            "dimension",
            f"embedder returned dimension {array.shape[1]}; the corpus's vectors have {dimension}",
        )
    if not np.isfinite(array).all():
        raise InvalidOutput("non-finite", "embedder returned NaN or infinite values")
    squared = np.einsum("ij,ij->i", array, array, dtype=np.float64)
    if (squared <= _MIN_SQUARED_NORM).any():
        raise InvalidOutput("zero", "embedder returned a zero vector")
    return array


class DimensionGuard(WrappedEmbedder):
    """Wraps a (shared) embedder; ``expected()`` is the corpus's dimension, None = any."""

    def __init__(self, inner: Embedder, expected: Callable[[], int | None]) -> None:
        super().__init__(inner)
        self._expected = expected
        self._reported: set[tuple[str, str]] = set()
        self._refused = False

    @property
    def output_refused(self) -> bool:
        """Whether the last embedding through this guard that got an answer had it
        refused here (``InvalidOutput``: NaN, zero, wrong rows or length) — which a
        provider's ``is_available()`` cannot know: a model re-pulled under its name with
        another length says it is up while every embedding is refused. Provider trouble
        (down, timed out) is left to ``is_available()`` to judge."""
        return self._refused

    def embed(self, texts: Sequence[str]) -> Vectors:
        with self._call():
            return self._checked(self._inner.embed(texts), len(texts))

    def embed_query(
        self, text: str, *, before_model: Callable[[], object] | None = None
    ) -> Vectors:
        with self._call():
            if isinstance(self._inner, QueryEmbedder):
                row = np.asarray(self._inner.embed_query(text, before_model=before_model))
                if row.ndim != 1:
                    self._refuse(
                        InvalidOutput(
                            "shape", f"embedder returned query shape {row.shape}; expected 1-D"
                        )
                    )
                vectors = row[None, :]
            else:
                if before_model is not None:
                    before_model()
                vectors = self._inner.embed([text])
            checked: Vectors = self._checked(vectors, 1)[0]
            return checked

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        """One embedding through the guard. Output refused here marks ``output_refused``
        (an answer taken clears it). An ``OSError`` out of the provider — a refused
        connection, a reset, a timeout (``requests``' and ``httpx``' connection errors are
        ``OSError`` s too) — is the provider being down, not this corpus's storage
        failing: it surfaced as ``StorageError`` and made a search raise instead of
        answering from keywords."""
        try:
            yield
        except InvalidOutput:
            self._refused = True
            raise
        except OSError as exc:
            raise EmbedderUnavailable(
                f"embedder {self._inner.name} failed ({type(exc).__name__})"
            ) from exc
        self._refused = False

    def _checked(self, vectors: object, rows: int) -> Vectors:
        try:
            return checked_output(vectors, rows, self._expected())
        except InvalidOutput as exc:
            self._refuse(exc)

    def _refuse(self, exc: InvalidOutput) -> NoReturn:
        # Once per fault (a dimension mismatch: per pair of lengths), not per query.
        key = (exc.kind, str(exc) if exc.kind == "dimension" else "")
        if key in self._reported:
            logger.debug("embedder %s: %s", self._inner.name, exc)
        else:
            self._reported.add(key)
            logger.warning(
                "%s; treating embedder %s as unavailable%s",
                exc,
                self._inner.name,
                " (use switch_embedder to change models)" if exc.kind == "dimension" else "",
            )
        raise exc
