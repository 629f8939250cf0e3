"""What another process may have changed in a store: the counters a reader compares."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StoreState:
    """The store's change counters, read together.

    ``seq`` grows with every committed write (documents, vectors, deletes); ``epoch``
    grows when every vector was dropped at once (an embedder switch: derived vector
    indexes start over and the corpus config is re-read); ``dropped`` is set just before
    ``drop_corpus`` deletes the corpus directory.
    """

    seq: int
    epoch: int = 0
    dropped: bool = False
