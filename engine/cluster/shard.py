"""One shard: a Ray actor that owns an ordinary Tandem engine directory.

The actor opens (or, the first time, creates) a ``SearchEngine`` in its directory with
one corpus, named like the sharded corpus, and answers the coordinator's calls on it.
When its process dies Ray restarts the actor (``max_restarts``); the new incarnation
runs ``__init__`` again and reopens the same directory — the store is the source of
truth and the derived indexes catch up from it, exactly as after a crash of a single
corpus. The directory lock (``flock``) makes a second incarnation wait until the first
one's process is gone; see the README on where that lock holds.

Documents arrive as plain rows (``engine.cluster.wire``) with the coordinator's vectors.
Engine errors are returned through Ray to the coordinator, which re-raises them.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from dense import Embedder
from engine.cluster.wire import Row, from_row
from engine.config import CorpusConfig, EmbedderSpec
from engine.documents import GrepMatch, Passage, SourceText
from engine.engine import SearchEngine
from engine.errors import CorpusNotFound, EngineError, EngineLocked, GrepTimeout, SourceNotFound
from engine.search.completion import shard_extras
from engine.search.windows import ArmWindow
from sparse import FieldFilter, TermStatistics

logger = logging.getLogger(__name__)

EmbedderFactory = Callable[[EmbedderSpec], Embedder]


class ShardMissing(EngineError):
    """A shard's directory holds no corpus, though the manifest says the shard exists."""


def _missing(spec: ShardSpec) -> ShardMissing:
    return ShardMissing(
        f"shard {spec.index}: no corpus {spec.config.name!r} in {spec.directory}, though "
        "the sharded corpus's manifest says the shard exists (its volume unmounted, or the "
        "directory moved?); refusing to start it empty"
    )


def _restarted() -> bool:
    """Whether Ray is restarting this actor (a create's first start is not a restart);
    ``False`` outside an actor (a shard body in this process)."""
    import ray

    if not ray.is_initialized():
        return False
    try:
        with warnings.catch_warnings():  # Ray's own use of its deprecated actor_id
            warnings.simplefilter("ignore", DeprecationWarning)
            return bool(ray.get_runtime_context().was_current_actor_reconstructed)
    except Exception:  # the driver, or the state API unreachable: treated as a first start
        return False


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """What a shard actor needs to (re)open itself. Must pickle: ``embedder_factory``
    is a module-level function or another picklable callable (``None``: the engine's
    default providers, models loaded only if this shard ever embeds by itself)."""

    index: int
    directory: str
    config: CorpusConfig
    embedder_factory: EmbedderFactory | None = None
    lock_wait_s: float = 60.0
    create: bool = False
    """The sharded corpus is being created: a shard whose corpus is missing makes it. On
    any other start (an open, a restart) a missing corpus is an error — its directory
    unmounted or moved — not a new, empty shard that hides the real one's documents."""


@dataclass(frozen=True, slots=True)
class ShardInfo:
    index: int
    pid: int
    node_id: str
    documents: int
    dimension: int | None = None
    """The length of the vectors the shard holds (``None``: it holds none)."""


class ShardActor:
    """The actor body (wrapped by ``ray.remote`` in ``engine.cluster.sharded``)."""

    def __init__(self, spec: ShardSpec) -> None:
        self._spec = spec
        self._incarnation = uuid.uuid4().hex
        directory = Path(spec.directory)
        makes = spec.create and not _restarted()
        if not makes and not (directory.is_dir() and any(directory.iterdir())):
            raise _missing(spec)  # before opening: an engine would be made in its place
        self._engine = _open_engine(directory, spec.embedder_factory, spec.lock_wait_s)
        try:
            self._corpus = self._engine.corpus(spec.config.name)
        except CorpusNotFound:
            if not makes:
                self._engine.close()
                raise _missing(spec) from None
            self._corpus = self._engine.create_corpus(spec.config)

    # -- health ---------------------------------------------------------------------------

    def info(self) -> ShardInfo:
        import ray

        return ShardInfo(
            index=self._spec.index,
            pid=os.getpid(),
            node_id=ray.get_runtime_context().get_node_id(),
            documents=len(self._corpus),
            dimension=self.vector_dimension(),
        )

    def vector_dimension(self) -> int | None:
        """The length of the vectors this shard holds (``None``: it holds none) — the
        corpus's, which the coordinator checks its embedder's output against."""
        index = self._corpus._indexes.faiss
        return None if index is None else index.dimension

    def ping(self) -> str:
        """This incarnation's id: a new one after every restart."""
        return self._incarnation

    # -- writes ---------------------------------------------------------------------------

    def add(
        self,
        rows: Sequence[Row],
        vectors: npt.NDArray[np.float32] | None,
        model: str | None,
        expected: int | None = None,
    ) -> tuple[int, int, int, int]:
        """``expected``: the length of the corpus's vectors as the coordinator knows it
        (``None``: unknown), which this shard holds to while it holds none of its own."""
        if expected is not None:
            self._corpus._expect_vector_length(expected)
        docs = [from_row(row) for row in rows]
        result = self._corpus.add(docs, embeddings=vectors, embedding_model=model, progress=False)
        return result.added, result.updated, result.unchanged, result.degraded

    def delete(self, ids: Sequence[str]) -> int:
        return self._corpus.delete(ids)

    def content_state(self, ids: Sequence[str]) -> dict[str, tuple[str, bool]]:
        return self._corpus._content_state(ids)

    # -- reads ----------------------------------------------------------------------------

    def keyword_window(
        self,
        text: str,
        limit: int,
        language: int | None,
        filters: tuple[FieldFilter, ...],
        index_backed: bool,
        need: int,
        statistics: TermStatistics | None = None,
    ) -> ArmWindow:
        with self._corpus._shard_reads() as reads:
            return reads.keyword_window(
                text, limit, language, filters, index_backed, need, statistics
            )

    def term_statistics(self, text: str, language: int | None) -> TermStatistics | None:
        with self._corpus._shard_reads() as reads:
            return reads.term_statistics(text, language)

    def vector_window(
        self,
        text: str,
        vector: npt.NDArray[np.float32],
        limit: int,
        language: int | None,
        filters: tuple[FieldFilter, ...],
        need: int,
        covered: Sequence[str],
    ) -> ArmWindow:
        with self._corpus._shard_reads() as reads:
            return reads.vector_window(
                text, vector, limit, language, filters, need, frozenset(covered)
            )

    def vector_round(
        self,
        text: str,
        vector: npt.NDArray[np.float32],
        limit: int,
        language: int | None,
        filters: tuple[FieldFilter, ...],
        need: int,
        covered: Sequence[str],
        keyword_ids: Sequence[str] | None,
        statistics: TermStatistics | None = None,
    ) -> tuple[ArmWindow, ArmWindow, ArmWindow]:
        """The vector window and, in the same call, this shard's part of completing the
        search (``engine.search.completion.shard_extras``; ``keyword_ids``: the global
        keyword window's documents this shard holds, ``None`` without completion): the
        keyword hits among its vector candidates outside that window, and the vector
        scores of those documents outside its vector window. Saves the coordinator a
        round trip after the merge. ``statistics``: what the keyword window was scored
        with, so the keyword extras are scored alike."""
        window = self.vector_window(text, vector, limit, language, filters, need, covered)
        if keyword_ids is None:
            return window, ArmWindow(), ArmWindow()
        for_keyword, for_vector = shard_extras(window.ids, keyword_ids)
        with self._corpus._shard_reads() as reads:
            keyword, scored = reads.completion_windows(
                text, vector, for_keyword, for_vector, language, filters, statistics
            )
        return window, keyword, scored

    def passages(
        self,
        ids: Sequence[str],
        text: str,
        language: int | None,
        filters: tuple[FieldFilter, ...],
    ) -> tuple[Passage, ...]:
        with self._corpus._shard_reads() as reads:
            return tuple(reads.passages_for(ids, text, language, filters))

    def fetch(self, source_id: str) -> SourceText | None:
        try:
            return self._corpus.fetch_source(source_id)
        except SourceNotFound:
            return None

    def grep(self, pattern: str, limit: int, fixed: bool) -> tuple[tuple[GrepMatch, ...], bool]:
        """Matches, and whether the scan ran out of its time budget first."""
        try:
            return tuple(self._corpus.grep(pattern, limit, fixed=fixed)), False
        except GrepTimeout as exc:
            return exc.matches, True

    def stats(self) -> Mapping[str, Any]:
        return {"index": self._spec.index, **self._corpus.stats()}

    def count(self) -> int:
        return len(self._corpus)

    def repair(self, batch_size: int, expected: int | None = None) -> int:
        """``expected``: as for ``add`` — a shard restarted since its last write holds no
        length of its own until told, and would otherwise keep vectors of any length."""
        if expected is not None:
            self._corpus._expect_vector_length(expected)
        return self._corpus.repair(batch_size)

    def flush(self) -> None:
        self._corpus.flush()

    def close(self) -> None:
        self._engine.close()


def _open_engine(
    directory: Path, factory: EmbedderFactory | None, lock_wait_s: float
) -> SearchEngine:
    """Open the shard's engine, waiting while a previous incarnation still holds the lock
    (its process may take a moment to die; on shared storage it may be another node's)."""
    deadline = time.monotonic() + lock_wait_s
    delay = 0.05
    while True:
        try:
            return SearchEngine(directory, embedder_factory=factory)
        except EngineLocked:
            if time.monotonic() >= deadline:
                raise
            logger.warning("shard directory %s is locked; waiting for its holder", directory)
            time.sleep(delay)
            delay = min(delay * 2, 1.0)
