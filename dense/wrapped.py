"""``WrappedEmbedder``: the base of an embedder that wraps another one."""

from __future__ import annotations

from dense.contracts import Embedder


class WrappedEmbedder:
    """Answers ``name``, ``dimension`` and ``is_available`` for the wrapped embedder;
    subclasses change what ``embed`` (and ``embed_query``) do with it."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner

    @property
    def inner(self) -> Embedder:
        return self._inner

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    def is_available(self) -> bool:
        return self._inner.is_available()

    @property
    def load_failed(self) -> bool:
        """The wrapped embedder's ``load_failed`` (False for one that has none)."""
        return bool(getattr(self._inner, "load_failed", False))
