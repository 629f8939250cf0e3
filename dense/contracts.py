"""The dense-arm contract: the ``Embedder`` protocol and its one failure type."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt


class DenseError(Exception):
    """Root of every exception ``dense`` raises on purpose."""


class EmbedderUnavailable(DenseError):
    """The embedding provider could not produce vectors (down, timing out, bad output).

    This is the one exception an ``Embedder`` raises for provider trouble, so the engine
    can tell "provider down" (degrade to keyword search) from a bug (propagate).
    """


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors.

    Contract:
    - ``embed(texts)`` returns an array of shape ``(len(texts), dimension)``, dtype
      float32, each row of unit L2 norm, in input order; ``embed([])`` returns shape
      ``(0, dimension)``. Provider trouble raises ``EmbedderUnavailable`` only; bad
      input (see ``checked_texts``) raises ``ValueError`` before any model or server
      sees it, so it never counts as provider trouble.
    - ``dimension`` is cached after the first look-up.
    - ``is_available()`` is cheap and never raises.
    - ``name`` identifies the model (used in cache keys and metrics-free logs).
    """

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...

    def is_available(self) -> bool: ...


def checked_texts(texts: Sequence[str], call: str = "embed") -> list[str]:
    """``texts`` as a list, or ``ValueError`` naming the first bad position: a single
    str, an item that is no str, or one that cannot be encoded as UTF-8 (a lone
    surrogate), which every tokenizer and HTTP client rejects deep inside a model call.
    The message names the position and the reason, never the text."""
    if isinstance(texts, str):
        raise ValueError(f"{call} takes a sequence of strings, not a single str")
    items = list(texts)
    for position, text in enumerate(items):
        if not isinstance(text, str):
            raise ValueError(f"{call}: text {position} is a {type(text).__name__}, not a str")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(
                f"{call}: text {position} is not valid UTF-8 ({exc.reason} at character "
                f"{exc.start})"
            ) from None
    return items


@runtime_checkable
class QueryEmbedder(Protocol):
    """An ``Embedder`` that can say when its model is about to run on a query.

    ``embed_query(text, before_model=hook)`` returns one unit row of shape
    ``(dimension,)`` and calls ``hook`` exactly once, after the cheap Python-side work
    (tokenising) and right before the model call, which releases the GIL. A caller that
    starts concurrent Python work from the hook gets it to run *during* the model call
    instead of competing with the tokeniser for the GIL.
    """

    def embed_query(
        self, text: str, *, before_model: Callable[[], object] | None = None
    ) -> npt.NDArray[np.float32]: ...


def embed_query(
    embedder: Embedder, text: str, *, before_model: Callable[[], object] | None = None
) -> npt.NDArray[np.float32]:
    """One query's unit row through any ``Embedder``; ``before_model`` runs exactly once,
    as late as the embedder allows (first thing, for embedders without the hook)."""
    if isinstance(embedder, QueryEmbedder):
        return embedder.embed_query(text, before_model=before_model)
    if before_model is not None:
        before_model()
    # Provider trouble, as for a document: an empty or 1-D answer failed the search with
    # an IndexError instead of sending it to keyword search.
    row: npt.NDArray[np.float32] = provider_rows(embedder.embed([text]), 1, "one query")[0]
    return row


def provider_rows(vectors: object, count: int, what: str) -> npt.NDArray[np.float32]:
    """``vectors`` as float32 rows if they are ``count`` rows of at least one value, else
    ``EmbedderUnavailable`` (``what`` names the texts in the message). Only the shape is
    checked: values are the corpus's guard's to judge."""
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            rows = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbedderUnavailable(
            f"embedder returned no numeric array for {what} ({type(exc).__name__})"
        ) from exc
    if rows.ndim != 2 or rows.shape[0] != count or rows.shape[1] == 0:
        raise EmbedderUnavailable(f"embedder returned shape {rows.shape} for {what}")
    return rows
