"""Precomputed vectors must come from the corpus's own model, at its dimension.

``Corpus.add(embeddings=..., embedding_model="all-MiniLM-L6-v2")`` says which model made
the vectors; a name that is not the corpus's model is refused before anything is
stored, because vectors of another model (even of the same dimension) would sit in the
index beside the corpus's own and answer queries with nonsense.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.errors import InvalidArgument

_ALIAS_PREFIXES = ("sentence-transformers/",)


def _canonical(name: str) -> str:
    for prefix in _ALIAS_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def same_model(a: str, b: str) -> bool:
    """Whether two model names denote one model (``sentence-transformers/x`` is ``x``)."""
    return _canonical(a) == _canonical(b)


def check_embedding_model(
    given: object, corpus_models: Sequence[str], corpus: str, *, has_embeddings: bool
) -> None:
    """Refuse ``given`` (the model that made the supplied vectors) unless it names the
    corpus's model (``corpus_models``: its names, e.g. the provider's and the config's).
    ``None`` is accepted: the caller vouches for the vectors."""
    if given is None:
        return
    if not isinstance(given, str) or not given:
        raise InvalidArgument("embedding_model must be a non-empty model name")
    if not has_embeddings:
        raise InvalidArgument("embedding_model names the model of embeddings; none were given")
    if not any(same_model(given, name) for name in corpus_models):
        expected = corpus_models[0] if corpus_models else None
        raise InvalidArgument(
            f"embeddings from model {given!r} refused: corpus {corpus!r} embeds with {expected!r}"
        )


def check_vector_dimension(supplied: int, corpus_dimension: int | None, corpus: str) -> None:
    """Refuse supplied vectors of another length than the corpus's (``None``: not known
    yet, e.g. the provider is down and the corpus holds no vector: accepted)."""
    if corpus_dimension is not None and supplied != corpus_dimension:
        raise InvalidArgument(
            f"embeddings have dimension {supplied}; corpus {corpus!r} holds vectors of "
            f"dimension {corpus_dimension}"
        )
