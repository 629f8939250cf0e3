"""``Corpus``: one searchable collection — its store, its indexes, its embedder."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from tqdm import tqdm

from dense import Embedder
from engine.config import CorpusConfig, EmbedderSpec, save_config
from engine.corpus_model import CorpusModel, guarded
from engine.dimension_guard import DimensionGuard
from engine.documents import AddResult, Document, GrepMatch, Passage, SourceText
from engine.errors import (
    CorpusNotFound,
    EngineError,
    InvalidArgument,
    StorageError,
    sealed,
    storage_error,
)
from engine.fields import sparse_kinds
from engine.filters import FilterInput, compile_filter
from engine.lifetime import Lifetime, in_lifetime
from engine.limits import is_wait_seconds
from engine.metrics import EngineMetrics
from engine.natural import Answer
from engine.natural.questions import CorpusQuestions
from engine.search.current_index import CurrentIndexBackend, GateFreeBackend
from engine.search.embed_deadline import DEFAULT_QUERY_EMBED_TIMEOUT_S
from engine.search.router import reported_up
from engine.search.searcher import Searcher, SearchState
from engine.search.sources import evidence_text, fetch_source, grep
from engine.search.visibility import DenseVisibility
from engine.storage import DocumentStore, EmbeddingStatus
from engine.storage.like_backend import DatabaseLikeBackend
from engine.write.batches import checked_documents, checked_ids
from engine.write.indexes import DerivedIndexes
from engine.write.reembed import check_switch, reembed_degraded
from engine.write.sync import CorpusSync, file_stamp
from engine.write.vector_model import check_embedding_model, check_vector_dimension
from sparse import KeywordSearchFacade, SearchBackend, TantivyBackend

logger = logging.getLogger(__name__)

_CHUNK = 512  # documents per store transaction / embedding call
_PROGRESS_MIN = 2_000  # show a progress bar from this many documents up


def _is_int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


class Corpus:
    """A searchable collection. Obtain one from ``SearchEngine``; don't construct it.

    Thread-safety: ``search``, ``evidence``, ``fetch_source`` and ``grep`` may run from any
    number of threads while one writer runs ``add``/``delete``/``repair`` (writes are
    serialised by the corpus's write lock, across threads and processes).

    Processes: every search first checks, with one ``PRAGMA data_version``, whether
    another process committed; if so this process's indexes follow before it searches
    (``engine.write.sync``).
    """

    def __init__(
        self,
        directory: Path,
        config: CorpusConfig,
        embedder: Embedder | None,
        metrics: EngineMetrics,
        gate: contextlib.AbstractContextManager[None] | None = None,
        search_threads: int | None = 1,
        *,
        read_only: bool = False,
        busy_timeout: float = 30.0,
        embedder_for: Callable[[EmbedderSpec], Embedder] | None = None,
        query_embed_timeout: float | None = DEFAULT_QUERY_EMBED_TIMEOUT_S,
    ) -> None:
        self._dir = directory
        self._dropped_here = False
        self._close_wait_s = busy_timeout
        self._lifetime = Lifetime(self._closed_error)
        self._gate = gate if gate is not None else contextlib.nullcontext()
        self._name = config.name
        self._metrics = metrics
        self._store = DocumentStore(directory / "store.sqlite3", read_only=read_only, existing=True)
        try:
            self._indexes = DerivedIndexes(
                directory,
                self._store,
                config.languages,
                vectors_enabled=embedder is not None,
                fields=sparse_kinds(config.fields),
                search_threads=search_threads,
                read_only=read_only,
                vector_storage=config.vector_storage,
                title_weight=config.title_weight,
            )
            self._sync = CorpusSync(
                directory,
                self._store,
                self._indexes,
                name=config.name,
                read_only=read_only,
                busy_timeout=busy_timeout,
                on_config_change=lambda: self._model.adopt_written_config(),
            )
            self._sync.open_indexes()
            embedder = None if embedder is None else guarded(embedder, self._indexes)
            self._visibility = DenseVisibility(self._store)
            backends: list[SearchBackend] = [
                CurrentIndexBackend(
                    TantivyBackend(self._indexes.tantivy, texts=self._store.public_bodies),
                    lambda: self._indexes.keyword_index_current,
                    self._gate,
                    on_unreadable=self._indexes.keyword_index_unreadable,
                ),
                GateFreeBackend(DatabaseLikeBackend(self._store), self._gate),
            ]
            self._searcher = Searcher(
                SearchState(
                    corpus=config.name,
                    config=config,
                    store=self._store,
                    indexes=self._indexes,
                    embedder=embedder,
                    keyword_full=KeywordSearchFacade.full_cascade(backends),
                    keyword_index_backed=KeywordSearchFacade.index_backed(backends),
                    visibility=self._visibility,
                    metrics=metrics,
                    gate=self._gate,
                ),
                query_embed_timeout=query_embed_timeout,
            )
            self._questions = CorpusQuestions(config.name, self._store, self._searcher, metrics)
            self._model = CorpusModel(
                directory,
                config,
                embedder,
                store=self._store,
                indexes=self._indexes,
                searcher=self._searcher,
                questions=self._questions,
                metrics=metrics,
                embedder_for=embedder_for,
            )
            self._refresh_gauges()
        except BaseException:
            # An open that fails (a full disk, a damaged file) must not keep the store,
            # the index files or the write lock's descriptor for the life of the process.
            self._abandon()
            raise

    # -- identity -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def config(self) -> CorpusConfig:
        return self._model.config

    @property
    def _embedder(self) -> Embedder | None:
        """The embedder writes use, guarded (``None``: a corpus without vectors)."""
        return self._model.embedder

    @sealed
    @in_lifetime
    def __len__(self) -> int:
        return self._store.count()

    def __repr__(self) -> str:
        return f"Corpus(name={self.name!r})"

    @property
    def read_only(self) -> bool:
        return self._sync.read_only

    def is_current(self) -> bool:
        """False once this corpus was dropped (here or by another process, possibly
        re-created since): reopen it through ``SearchEngine.corpus``."""
        return not self._sync.dropped and self._store.same_file()

    @property
    def _closed(self) -> bool:
        """Internal (``SearchEngine.corpus``): closed by a caller, so the engine opens a
        new object for the next ``corpus(name)`` instead of handing this one out."""
        return self._lifetime.ended and not self._dropped_here

    # -- reads ----------------------------------------------------------------------------

    @sealed
    @in_lifetime
    def search(
        self,
        query: str,
        top_k: int = 10,
        offset: int = 0,
        language_id: int | None = None,
        *,
        filters: FilterInput | None = None,
    ) -> list[Passage]:
        """The best public passages for ``query``, best first.

        Inputs are clamped, never rejected: the query is trimmed and cut to
        ``sparse.MAX_QUERY_LENGTH`` (shorter than ``sparse.MIN_QUERY_LENGTH`` → ``[]``),
        ``top_k`` to ``1..MAX_TOP_K``, a negative ``offset`` to 0 (past ``MAX_OFFSET`` the
        page is empty, so paging until an empty page stops), a negative ``language_id``
        to 0 (``None``: any language). Every page is cut from one order, so paging
        neither repeats nor skips a document: the fusion window's ranking
        (default 100), then — for pages past it — the ranking of the deepest window
        (``MAX_SOURCES`` per arm) without those documents.

        ``filters`` restricts the search to documents whose declared fields match (see
        ``engine.filters``: ``Eq``/``In``/``Range`` combined with ``&``, the dict/JSON
        form, or a list of either, AND-ed). They apply inside both arms before the top k
        is cut, so a filtered search returns ``top_k`` passages when that many eligible
        documents match. A malformed filter — unknown field, wrong type — raises
        ``InvalidArgument`` naming the field.
        """
        compiled = compile_filter(filters, self.config.fields)
        self._sync.follow()
        return self._searcher.search(query, top_k, offset, language_id, compiled)

    @sealed
    @in_lifetime
    def ask(
        self,
        question: str,
        *,
        user: str = "anonymous",
        top_k: int = 10,
        language_id: int | None = None,
    ) -> Answer:
        """Answer a natural-language question with passages, and say how it was understood.

        A local Ollama model (``CorpusConfig.natural``) turns the question into search
        words and filter values; only the question and the field schema are sent to it.
        Extracted values are resolved against the store's declared values afterwards;
        unresolved ones are searched as text. ``Answer.interpretation`` lists every part.

        Raises ``InvalidArgument`` for a question longer than 500 characters (or empty),
        ``RateLimited`` (with ``retry_after_s``) when ``user`` asked too often, and
        ``NaturalSearchUnavailable`` whenever the model cannot answer properly (not
        configured, unreachable, timed out, not pulled, malformed output). ``search`` is
        never affected by any of this.
        """
        self._sync.follow()
        return self._questions.ask(self.config, question, user, top_k, language_id)

    @sealed
    @in_lifetime
    def evidence(self, question: str, top_k: int = 5) -> str:
        """A text package of the best sources for an LLM prompt (empty string: none)."""
        return evidence_text(self.search(question, top_k=top_k))

    @sealed
    @in_lifetime
    def fetch_source(self, source_id: str) -> SourceText:
        """The full text of one public source, capped at ``MAX_FETCH_CHARS``.

        Raises ``InvalidArgument`` for an id outside the source-id grammar and
        ``SourceNotFound`` for an unknown or non-public id.
        """
        return fetch_source(self._store, source_id)

    @sealed
    @in_lifetime
    def grep(self, pattern: str, limit: int = 20, *, fixed: bool = False) -> list[GrepMatch]:
        """Regex (or, with ``fixed=True``, exact) matches in public sources' text.

        For agents and scripts, not ranked. Bounded: pattern length, match count and a
        wall-clock budget (``GREP_TIMEOUT_S``); a scan that runs out of budget raises
        ``GrepTimeout`` (its ``matches`` hold what was found), never a short list.
        """
        return grep(self._store, pattern, limit, fixed=fixed)

    # -- writes ---------------------------------------------------------------------------

    @sealed
    @in_lifetime
    def add(
        self,
        documents: Iterable[Document],
        *,
        embeddings: object | None = None,
        embedding_model: str | None = None,
        progress: bool | None = None,
    ) -> AddResult:
        """Insert or replace documents by id. When this returns, they are durable.

        ``embeddings``: optional precomputed vectors, one row per document in order (from
        the corpus's own model). ``embedding_model`` names the model that made them; a
        name other than the corpus's model is refused (``InvalidArgument``). Every
        document is validated first; if any is invalid, ``InvalidArgument`` names it and
        nothing is stored. Documents whose embedding fails are stored keyword-searchable
        and counted as degraded.
        """
        docs, supplied = checked_documents(
            documents, self.config.fields, embeddings, vectors_enabled=self._embedder is not None
        )
        totals = [0, 0, 0, 0]
        show = progress if progress is not None else len(docs) >= _PROGRESS_MIN
        with (
            self._sync.writing(),
            self._indexes.bulk_writes(),
            tqdm(total=len(docs), disable=not show, desc=f"add {self.name}", unit="doc") as bar,
        ):
            # Under the lock: the config is current here (another process may have
            # switched the model since this one last looked) and nothing is written yet.
            check_embedding_model(
                embedding_model,
                self._model.model_names(),
                self.name,
                has_embeddings=supplied is not None,
            )
            if supplied is not None:
                check_vector_dimension(supplied.shape[1], self._model.vector_dimension(), self.name)
            for start in range(0, len(docs), _CHUNK):
                chunk = docs[start : start + _CHUNK]
                vectors = None if supplied is None else supplied[start : start + _CHUNK]
                counts = self._model.ingestor.write(chunk, vectors)
                totals = [a + b for a, b in zip(totals, counts, strict=True)]
                bar.update(len(chunk))
            # Heal after writing: a degraded document this add replaces is embedded once,
            # with its new text, never first with the old one.
            if self._embedder is not None and supplied is None:
                self._heal_some()
            self._refresh_gauges()
        return AddResult(*totals)

    @sealed
    @in_lifetime
    def delete(self, ids: Iterable[str]) -> int:
        """Delete documents by id; returns how many existed. Unknown ids are ignored."""
        wanted = checked_ids(ids)
        with self._sync.writing():
            deleted = self._store.delete(wanted)
            self._indexes.apply([], deleted, self._store.seq)
            self._refresh_gauges()
        return len(deleted)

    @sealed
    @in_lifetime
    def repair(
        self,
        batch_size: int = 256,
        *,
        max_documents: int | None = None,
        lock_wait_s: float | None = None,
    ) -> int:
        """Re-embed degraded documents while the embedder answers; returns how many healed.

        Works in batches of ``batch_size`` (one embedder call and one store transaction
        each) and stops at the first batch that fails, or after ``max_documents``. A failed
        batch makes this process's next one half as big, so a document the provider
        refuses is found and held back (``engine.write.repair_plan``). Waits
        at most ``lock_wait_s`` (default: the engine's busy timeout) for another write to
        finish, then raises ``EngineBusy``.
        """
        if not _is_int_in(batch_size, 1, 10_000):
            raise InvalidArgument("batch_size must be an integer in 1..10000")
        if max_documents is not None and not _is_int_in(max_documents, 1, 2**63 - 1):
            raise InvalidArgument("max_documents must be an integer >= 1 or None")
        if lock_wait_s is not None and not is_wait_seconds(lock_wait_s):
            raise InvalidArgument("lock_wait_s must be a finite number of seconds >= 0 or None")
        if not self.read_only and not self._store.count_status(EmbeddingStatus.DEGRADED):
            return 0  # nothing to heal: no need to wait for the write lock
        healed = 0
        with self._sync.writing(lock_wait_s):
            try:
                while max_documents is None or healed < max_documents:
                    size = (
                        batch_size
                        if max_documents is None
                        else min(batch_size, max_documents - healed)
                    )
                    n = self._model.ingestor.repair(size)
                    healed += n
                    if n == 0:  # none left, or the batch failed (smaller ones may heal)
                        break
                    self._refresh_gauges()
            finally:
                self._refresh_gauges()
        return healed

    @sealed
    @in_lifetime
    def switch_embedder(
        self,
        config: CorpusConfig,
        embedder: Embedder,
        *,
        batch_size: int = 256,
        progress: bool | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Re-embed every document with another embedder; use ``SearchEngine.switch_embedder``.

        Every stored vector is dropped and every document counted degraded; the new config
        is written (atomically) before re-embedding starts, so a crash part-way leaves a
        consistent corpus that ``repair`` finishes. Searches answer from keyword search
        until the pass ends; writes wait for it. ``on_progress(done, total)`` is called
        after each batch. Returns how many documents were re-embedded; any the provider
        failed on stay degraded and heal like other degraded documents.
        """
        check_switch(self.config, config, embedder, batch_size)
        with self._sync.writing():
            if self._embedder is None:
                raise InvalidArgument(
                    f"corpus {self.name!r} has vectors off; create a new corpus to turn them on"
                )
            # Keyword search from here until the pass ends: one new snapshot, installed whole.
            self._model.search_with(embedder=None)
            new_embedder = self._model.guard(embedder)
            try:
                total = self._store.mark_all_degraded()
                self._indexes.drop_vectors(self._store.seq)
                save_config(self._dir / "config.json", config)
                self._sync.config_stamp = file_stamp(self._dir / "config.json")
                self._model.write_with(config, new_embedder)
                self._model.search_with(config=config)
                self._refresh_gauges()
                logger.info("switching embedder: re-embedding %d documents", total)
                done = reembed_degraded(
                    self._model.ingestor,
                    total,
                    batch_size,
                    desc=f"re-embed {self.name}",
                    show=progress if progress is not None else total >= _PROGRESS_MIN,
                    after_batch=self._refresh_gauges,
                    on_progress=on_progress,
                )
            finally:
                self._model.search_with(embedder=self._embedder)
                self._refresh_gauges()
        logger.info("embedder switched: %d re-embedded, %d left degraded", done, total - done)
        return done

    # -- internal: for engine.surfaces (a server warms its models before it is ready) ----

    def _expect_vector_length(self, width: int) -> None:
        """Internal (a shard of a sharded corpus): the corpus holds vectors of ``width``
        values, though this shard may hold none yet — its embedder's output and supplied
        vectors are checked against it, so an empty shard cannot take another length."""
        self._indexes.expected_dimension = width

    def _warm_up(self) -> None:
        """Load the query model now, so the first search does not pay for it (seconds).
        Never raises: a model that cannot load leaves the corpus answering from keywords,
        as the first search would have."""
        embedder = self._searcher.state.embedder
        if embedder is None:
            return
        try:
            embedder.embed(["warm-up"])
        except Exception as exc:  # the contract: never raises; the router degrades later
            logger.warning("corpus %r: embedder warm-up failed (%s)", self.name, type(exc).__name__)
            logger.debug("warm-up failure", exc_info=True)

    def _searches_are_short(self) -> bool:
        """True when a search here calls no model and reads a current keyword index: it is
        then a few milliseconds of CPU with nothing to wait for, which a server may run
        on its event loop rather than pay a hand-over to a worker thread and back (~1 ms
        on a 2-core machine, half of a keyword search). A corpus with an embedder, or
        whose index is behind (the database fallback scans), answers False."""
        state = self._searcher.state
        return state.embedder is None and state.keyword_index_backed.is_available()

    # -- internal: for engine.cluster (a shard is a corpus) ----------------------------

    @contextlib.contextmanager
    def _shard_reads(self) -> Iterator[Searcher]:
        """The searcher a shard answers its coordinator's window, completion and passage
        calls with (``Searcher.keyword_window`` and the rest; ``engine.cluster.shard``),
        for one call counted in the corpus's lifetime like any public one, after taking
        in what other processes committed (as ``search`` does)."""
        with self._lifetime.call():
            self._sync.follow()
            yield self._searcher

    @in_lifetime
    def _field_values(
        self, ids: Sequence[str]
    ) -> dict[str, tuple[dict[str, frozenset[str | int]], bool]]:
        """For stored ids (public or not): every encoded value of each filter field (a
        field may hold several) and whether they are public (for
        ``engine.surfaces.memory``, which must not overwrite another scope's memory, nor a
        non-public document)."""
        stored = self._store.get_many(ids, public_only=False)
        found: dict[str, tuple[dict[str, frozenset[str | int]], bool]] = {}
        for sid, doc in stored.items():
            values: dict[str, set[str | int]] = {}
            for name, value in doc.fields:
                values.setdefault(name, set()).add(value)
            found[sid] = ({name: frozenset(v) for name, v in values.items()}, doc.is_public)
        return found

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the write lock across a read and the ``add`` it decides (the lock is
        re-entrant in one thread): no other writer, here or in another process, comes
        between them (``engine.surfaces.memory``'s check of an id's scope). Inside the
        corpus's lifetime, with storage errors in the engine's words, as a public
        method's (a corpus closed meanwhile is a ``StorageError``, not a bare OSError)."""
        with self._lifetime.call():
            try:
                with self._sync.writing():
                    yield
            except EngineError:
                raise
            except (sqlite3.Error, OSError) as exc:
                raise storage_error(exc) from exc

    @in_lifetime
    def _content_state(self, ids: Sequence[str]) -> dict[str, tuple[str, bool]]:
        """For stored ids: (content hash, has a vector) — what need not be embedded again."""
        return self._store.content_state(ids)

    def _heal_some(self) -> None:
        """On ``add``, heal a bounded batch of degraded documents first (if any)."""
        if self._store.count_status(EmbeddingStatus.DEGRADED):
            self._model.ingestor.repair(_CHUNK)

    # -- housekeeping ---------------------------------------------------------------------

    @sealed
    @in_lifetime
    def stats(self) -> dict[str, int | bool]:
        """Counts and state: ``documents``, ``degraded``, ``vectors``,
        ``vector_graph_pending``, ``vectors_enabled``, ``index_bytes``, and
        ``embedder_up`` — the embedder's own ``is_available()`` (unless its last answer
        was refused or its last load failed: see ``_embedder_up_now``), so as far as this
        process knows: a local model that no one has tried to load here yet counts as up
        (``tandem stats`` loads it first); the gauge is set to it too."""
        self._sync.follow()
        faiss = self._indexes.faiss
        embedder_up = self._embedder_up_now()
        if self._embedder is not None:
            self._metrics.embedder_up.labels(self.name).set(1 if embedder_up else 0)
        return {
            "documents": self._store.count(),
            "degraded": self._store.count_status(EmbeddingStatus.DEGRADED),
            "vectors": 0 if self._indexes.faiss is None else len(self._indexes.faiss),
            "vector_graph_pending": faiss is not None and faiss.graph_pending,
            "vectors_enabled": self._embedder is not None,
            "embedder_up": embedder_up,
            "index_bytes": self._indexes.size_on_disk(),
        }

    @in_lifetime
    def refresh_metrics(self) -> None:
        """Re-read the corpus-state gauges from the store (the engine does it per scrape,
        and asks the embedder apart: ``_check_embedder``)."""
        self._refresh_gauges()

    def _check_embedder(self) -> None:
        """Internal (``SearchEngine``'s scrapes, on a thread of their own): set the
        embedder gauge from a health check. Never raises; sets nothing once the corpus
        is closed or dropped (its series must not come back)."""
        try:
            up = self._embedder_up_now()
            with self._lifetime.call():
                self._metrics.embedder_up.labels(self.name).set(1 if up else 0)
        except Exception as exc:  # a thread's last frame: say it, never raise it
            logger.debug("embedder check of corpus %r failed (%s)", self.name, type(exc))

    def _embedder_up_now(self) -> bool:
        """Whether the embedder is up: its ``is_available()``, unless its last answer was
        refused (``DimensionGuard.output_refused``) or its model's last load failed
        (``reported_up``); False without one. A custom
        embedder's exception counts as down."""
        embedder = self._embedder
        if embedder is None:
            return False
        try:
            up = embedder.is_available()
        except Exception as exc:  # the contract says never raises; a custom one might
            logger.warning(
                "corpus %r: embedder health check raised %s", self.name, type(exc).__name__
            )
            up = False
        refused = isinstance(embedder, DimensionGuard) and embedder.output_refused
        return reported_up(embedder, up) and not refused

    def _refresh_gauges(self) -> None:
        # Public documents only: anyone may read a server's /metrics, and a count that
        # moved with non-public documents would tell them those exist.
        self._metrics.documents.labels(self.name).set(self._store.count_public())
        self._metrics.documents_degraded.labels(self.name).set(
            self._store.count_public(EmbeddingStatus.DEGRADED)
        )

    @sealed
    @in_lifetime
    def flush(self) -> None:
        """Commit pending index writes and save the vector index file (waits for the
        write lock; nothing to do on a read-only engine)."""
        if self.read_only:
            return
        with self._sync.writing():
            self._indexes.flush()

    @sealed
    def close(self) -> None:
        """Release everything; saves this process's vector index first when the write
        lock is free (closing never waits for another process's write). New calls are
        refused at once; calls in flight finish first (see ``engine.lifetime``)."""
        self._lifetime.end(self._release, self._close_wait_s)

    def _drop_waiting(self) -> contextlib.AbstractContextManager[None]:
        """For ``SearchEngine.drop_corpus`` while it waits for the write lock: this
        process's new writes wait behind the drop instead of starving it."""
        return self._sync.drop_waiting()

    def _discard(self) -> None:
        """Close for a drop: nothing is saved (the directory is about to go, and a
        corpus of the same name may be created there next), and later calls are told
        the corpus was dropped."""
        self._dropped_here = True
        self._sync.end_for_drop()  # writes waiting for the drop's lock leave at once
        self._lifetime.end(lambda: self._release(save=False), self._close_wait_s)

    def _abandon(self) -> None:
        """Release whatever is still open — after a failed ``__init__`` (which may have
        opened only part of it) and at the end of every close, whatever its save did."""
        releases: list[Callable[[], None]] = []
        if (questions := getattr(self, "_questions", None)) is not None:
            releases.append(questions.reset)
        if (searcher := getattr(self, "_searcher", None)) is not None:
            releases.append(searcher.close)
        if (indexes := getattr(self, "_indexes", None)) is not None:
            releases.append(lambda: indexes.close(flush=False))
        releases.append(self._store.close)
        if (sync := getattr(self, "_sync", None)) is not None:
            releases.append(sync.close)
        for step in releases:
            try:
                step()
            except Exception as exc:  # the open's or the save's own error is the one to report
                logger.warning("releasing a corpus's files failed (%s)", type(exc).__name__)

    def _closed_error(self) -> Exception:
        if self._dropped_here or self._sync.dropped:
            return CorpusNotFound(f"corpus {self.name!r} was dropped")
        return StorageError(f"corpus {self.name!r} is closed")

    def _release(self, *, save: bool = True) -> None:
        try:
            if save:
                with self._sync.closing() as holder:  # the store closes under the lock too
                    self._questions.reset()
                    self._searcher.close()
                    self._indexes.close(flush=holder)
                    self._store.close()
        finally:
            # A save that failed part-way (a catch-up on a full disk) must not leave the
            # store, the index files or the write lock's descriptor open for good: the
            # lifetime has ended, so no later close() would release them.
            self._abandon()
