"""``SearchEngine``: an embedded engine rooted in one directory, holding named corpora.

Layout: ``<root>/corpora/<name>/`` holds ``config.json``, the SQLite store, the derived
indexes and ``write.lock``. Corpus names follow a strict grammar, so none can escape the
root.

Like SQLite, any number of engines — in this process or others — may open one root.
Writes to a corpus take its ``write.lock`` (``engine.write.lock``; creating and dropping
corpora take ``<root>/.lock``), waiting at most ``busy_timeout`` seconds before
``EngineBusy``; reads never wait for them, and see every committed write
(``engine.write.sync``). ``read_only=True`` opens without any lock file and refuses
writes (``EngineReadOnly``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import pydantic
from prometheus_client import CollectorRegistry

from engine.config import STORED, CorpusConfig, EmbedderSpec, save_config
from engine.corpus import Corpus
from engine.embedders import EmbedderFactory, EmbedderPool
from engine.errors import (
    CorpusExists,
    CorpusNotFound,
    EngineBusy,
    EngineError,
    EngineReadOnly,
    InvalidArgument,
    StorageError,
    sealed,
)
from engine.health_checks import HealthChecks
from engine.limits import is_valid_corpus_name, is_wait_seconds
from engine.metrics import EngineMetrics
from engine.search.embed_deadline import DEFAULT_QUERY_EMBED_TIMEOUT_S
from engine.search.gate import SearchGate
from engine.storage import DocumentStore
from engine.storage.store import announce_change_at
from engine.write.lock import WriteLock, network_filesystem
from engine.write.repairer import BackgroundRepairer
from engine.write.sync import mark_dropped

if TYPE_CHECKING:
    from engine.surfaces.metrics_http import MetricsServer

logger = logging.getLogger(__name__)

_TOMBSTONE = ".dropped-"  # a dropped corpus's directory, renamed, until it is deleted


def _marked_dropped(directory: Path) -> bool:
    """True when the corpus's store records a drop: one that died after marking the
    store and before moving the directory away left it looking like a live corpus."""
    store = directory / "store.sqlite3"
    if not store.is_file():
        return False
    try:
        conn = sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'dropped'").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    return row is not None and row[0] == "1"


def _checked_search_threads(threads: object) -> int | None:
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InvalidArgument("search_threads must be a positive int or None")
    return threads


def _checked_query_embed_timeout(seconds: object) -> float | None:
    if seconds is None:
        return None
    if not is_wait_seconds(seconds) or seconds == 0:
        raise InvalidArgument("query_embed_timeout must be a finite number of seconds > 0, or None")
    assert isinstance(seconds, int | float)
    return float(seconds)


def _checked_busy_timeout(seconds: object) -> float:
    if not is_wait_seconds(seconds):
        raise InvalidArgument("busy_timeout must be a finite number of seconds >= 0")
    assert isinstance(seconds, int | float)
    return float(seconds)


class SearchEngine:
    """Embedded, persistent hybrid search over named corpora.

    Args:
        path: the engine's directory (created if missing).
        embedder_factory: builds an ``Embedder`` from a corpus's embedder spec; the
            default builds sentence-transformers or Ollama providers. One instance per
            distinct spec is shared by all corpora.
        registry: the Prometheus registry to register metrics on (default: a fresh one
            owned by this engine; nothing is registered globally).
        search_threads: FAISS's OpenMP threads per query on this engine's vector
            indexes (whichever thread searches; ``None`` leaves FAISS's default). One is
            best for many small concurrent queries; graph builds always use every core.
        serialize_searches: run the CPU-bound Python part of this engine's searches one
            at a time, first come first served (``engine.search.gate``). With many
            threads searching one engine this avoids interpreter-lock thrash (8 keyword
            readers on 2 cores: p95 14.7 → 4.8 ms); model calls and database scans stay
            outside it. To use more cores, open the directory from more processes.
        busy_timeout: how long a write (add, delete, repair, switch_embedder, flush,
            create/drop corpus) waits for another one in progress — in another process,
            or another thread or engine of this one — before raising ``EngineBusy``
            (nothing of it written). Reads never wait.
        read_only: open without taking or creating any lock file and without writing
            anything; every write raises ``EngineReadOnly``. Works on a directory this
            process may read but not write, and follows other processes' writes.
        query_embed_timeout: ``None`` (the default): a hybrid search embeds its query in
            the searching thread and waits for the vector however long it takes. A number
            of seconds: it embeds on a worker thread and waits at most that long; past it
            that search is answered from keywords, counted as ``embedder_timeout``, and so
            is every search while that call still runs (``engine.search.embed_deadline``:
            why it is off by default, and why 30 s is a good value). Writes are not
            bounded by it.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        embedder_factory: EmbedderFactory | None = None,
        registry: CollectorRegistry | None = None,
        search_threads: int | None = 1,
        serialize_searches: bool = True,
        busy_timeout: float = 30.0,
        read_only: bool = False,
        query_embed_timeout: float | None = DEFAULT_QUERY_EMBED_TIMEOUT_S,
    ) -> None:
        self._search_threads = _checked_search_threads(search_threads)
        self._query_embed_timeout = _checked_query_embed_timeout(query_embed_timeout)
        self._busy_timeout = _checked_busy_timeout(busy_timeout)
        self._read_only = bool(read_only)
        self._gate: contextlib.AbstractContextManager[None] = (
            SearchGate() if serialize_searches else contextlib.nullcontext()
        )
        if not isinstance(path, str | os.PathLike):
            raise InvalidArgument(f"path must be a str or os.PathLike, got {type(path).__name__}")
        if "\0" in os.fsdecode(path):  # every file call would raise a bare ValueError
            raise InvalidArgument("path must not contain a NUL character")
        self._root = Path(path).expanduser()  # "~/tandem" is the home's, not a "~" here
        if self._read_only:
            if not (self._root / "corpora").is_dir():
                raise EngineReadOnly(
                    f"{self._root} does not exist or is not an engine directory; a "
                    "read-only engine cannot create it"
                )
            self._engine_lock: WriteLock | None = None
        else:
            try:
                (self._root / "corpora").mkdir(parents=True, exist_ok=True)
                self._engine_lock = WriteLock(self._root / ".lock")
            except OSError as exc:  # a file in the way, a read-only or full disk
                raise StorageError(
                    f"cannot open {self._root} as an engine directory "
                    f"({type(exc).__name__}: {exc.strerror or exc})"
                ) from exc
            kind = network_filesystem(self._root)
            if kind is not None:
                logger.warning(
                    "the engine directory is on a %s filesystem, where flock may not keep "
                    "writers on other machines apart; keep engine directories on local disks",
                    kind,
                )
        self.metrics = EngineMetrics(registry)
        self._embedders = EmbedderPool(embedder_factory)
        self._corpora: dict[str, Corpus] = {}
        self._lock = threading.RLock()
        self._closed = False
        self._closing = False
        self._servers: list[MetricsServer] = []
        self._unopenable: set[str] = set()  # corpora _every_corpus has warned about
        self._repairer: BackgroundRepairer | None = None
        self._health_checks = HealthChecks()
        self.metrics.set_refresher(self._refresh_metrics)

    @contextlib.contextmanager
    def _engine_writing(self) -> Iterator[None]:
        """The root's lock, for creating and dropping corpora (bounded wait)."""
        lock = self._engine_lock
        if lock is None:
            raise EngineReadOnly(f"{self._root} is open read-only")
        self._check_not_closing()
        try:
            acquired = lock.acquire(self._busy_timeout)
        except OSError:  # closed while this call waited for it (a close holds it then)
            self._check_not_closing()
            raise
        if not acquired:
            self._check_not_closing()  # a close, not another engine, held it meanwhile
            raise EngineBusy(
                f"{self._root}: another engine held the lock for {self._busy_timeout:g} s "
                "(busy_timeout)"
            )
        try:
            # A close that began while this call waited: write nothing (a close waits
            # for the lock this call now holds, so none can begin from here on).
            self._check_not_closing()
            yield
        finally:
            lock.release()

    @property
    def path(self) -> Path:
        return self._root

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def registry(self) -> CollectorRegistry:
        return self.metrics.registry

    # -- corpora --------------------------------------------------------------------------

    def _corpus_dir(self, name: object) -> Path:
        if not is_valid_corpus_name(name):
            raise InvalidArgument(
                "corpus name must be 1-64 characters of a-z, 0-9, '_' or '-', starting "
                "with a letter or digit"
            )
        return self._root / "corpora" / str(name)

    @sealed
    def list_corpora(self) -> list[str]:
        self._check_open()
        base = self._root / "corpora"
        return sorted(
            p.name
            for p in base.iterdir()
            if p.is_dir()
            and (p / "config.json").is_file()
            and is_valid_corpus_name(p.name)
            and not _marked_dropped(p)
        )

    @sealed
    def create_corpus(self, config: CorpusConfig) -> Corpus:
        """Create and open a new corpus. Raises ``CorpusExists`` if the name is taken."""
        self._check_open()
        if not isinstance(config, CorpusConfig):
            raise InvalidArgument("create_corpus takes an engine.CorpusConfig")
        try:
            # Validated again as it will be read back: a config built without validation
            # (``model_copy(update=...)``) was written, listed, and never opened again.
            config = CorpusConfig.model_validate(config.model_dump(warnings=False))
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise InvalidArgument(f"invalid corpus config: {exc}") from None
        # The root's lock alone while waiting: the engine's own lock, held for that wait
        # (up to ``busy_timeout``), stalled every thread opening any corpus meanwhile —
        # a server's reads of corpora nobody was writing.
        with self._engine_writing():
            directory = self._corpus_dir(config.name)
            if (directory / "config.json").exists():
                if not _marked_dropped(directory):
                    raise CorpusExists(f"corpus {config.name!r} already exists")
                self._remove(config.name, directory)  # a drop that died part-way
            if directory.exists():
                # No config: a create that crashed before writing it. Nothing there was
                # ever a corpus; start clean rather than reopen what it left.
                shutil.rmtree(directory)
            self._sweep_dropped(directory.parent)
            directory.mkdir(parents=True)
            # The config is the corpus's commit point, so it comes last: a create killed
            # before it leaves a directory no engine lists (the next create clears it),
            # never a listed corpus without a store that read-only engines cannot open.
            DocumentStore(directory / "store.sqlite3").close()
            save_config(directory / "config.json", config)
            with self._lock:
                return self._open(config, directory)

    @sealed
    def corpus(self, name: str) -> Corpus:
        """Open an existing corpus (the same object on every call)."""
        self._check_open()
        directory = self._corpus_dir(name)  # validates first: a list is not a name
        config_path = directory / "config.json"
        with self._lock:
            self._check_open()  # again: a close may have run while this call waited
            known = self._corpora.get(name)
            if known is not None and known.is_current() and not known._closed:
                return known
            if known is not None:  # closed by its caller, or dropped (and maybe re-created)
                del self._corpora[name]  # by another engine: a new object answers from now
                if not known._closed:
                    with contextlib.suppress(EngineError, sqlite3.Error, OSError):
                        known._discard()  # saves nothing: the directory may be a new corpus's
            if not (config_path.is_file() and _marked_dropped(directory)):
                if not config_path.is_file():
                    if known is not None:  # dropped by another engine: its series go too
                        self.metrics.forget(name)
                    raise CorpusNotFound(f"no corpus named {name!r}")
                try:
                    config = _read_config(name, config_path)
                    return self._open(config, directory)
                except (OSError, sqlite3.Error, StorageError):
                    # Another process dropped it between the check and the open (its
                    # directory renamed away under us): absent, not a storage failure.
                    if not config_path.is_file():
                        raise CorpusNotFound(f"no corpus named {name!r}") from None
                    raise
        # A drop that died between marking the store and moving it away: finish it — if it
        # is still that once this engine holds the root's lock (a live drop, here or
        # elsewhere, holds it until done, and may be followed by a create). Not under the
        # engine's own lock: a drop in another thread holds the root's and then takes that.
        if self._read_only:
            raise CorpusNotFound(f"no corpus named {name!r}")
        with self._engine_writing():
            if not (config_path.is_file() and _marked_dropped(directory)):
                return self.corpus(name)  # re-created meanwhile, or gone
            with contextlib.suppress(OSError):
                self._remove(name, directory)
        raise CorpusNotFound(f"no corpus named {name!r}")

    def _opened(self, name: str) -> Corpus | None:
        """The corpus ``name`` if it is open here and current, else None — without taking
        the engine's lock, which a drop may hold while it waits for a writer (a server's
        event loop asks this and must not wait)."""
        known = None if self._closed else self._corpora.get(name)
        current = known is not None and known.is_current() and not known._closed
        return known if current else None

    def _open(self, config: CorpusConfig, directory: Path) -> Corpus:
        embedder = None if config.embedder is None else self._embedders.get(config.embedder)
        corpus = Corpus(
            directory,
            config,
            embedder,
            self.metrics,
            gate=self._gate,
            search_threads=self._search_threads,
            read_only=self._read_only,
            busy_timeout=self._busy_timeout,
            embedder_for=self._embedders.get,
            query_embed_timeout=self._query_embed_timeout,
        )
        self.metrics.track(config.name, vectors=embedder is not None)
        self._corpora[config.name] = corpus
        return corpus

    @sealed
    def drop_corpus(self, name: str) -> None:
        """Delete a corpus and everything in it. Raises ``CorpusNotFound``."""
        self._check_open()
        with self._engine_writing():  # alone while waiting, as in ``create_corpus``
            directory = self._corpus_dir(name)
            if not (directory / "config.json").is_file():
                raise CorpusNotFound(f"no corpus named {name!r}")

            def discard() -> None:
                with self._lock:
                    corpus = self._corpora.pop(name, None)
                if corpus is not None:
                    corpus._discard()  # waits for this process's calls in flight on it

            # Waits for a write in progress, and only then discards this process's
            # object: a drop refused with EngineBusy leaves the corpus open and whole.
            # Other processes learn of the drop from the store and stop answering for it.
            # This process's own new writes wait behind the drop (``drop_waiting``).
            open_here = self._corpora.get(name)
            with open_here._drop_waiting() if open_here is not None else contextlib.nullcontext():
                mark_dropped(directory, self._busy_timeout, first=discard)
            self._remove(name, directory)
            with self._lock:
                self._embedders.keep_only(self._specs_in_use())

    def _remove(self, name: str, directory: Path) -> None:
        """The last step of a drop (engine lock held). Out of the way in one rename, then
        deleted: a crash part-way leaves a tombstone (swept by the next drop), never a
        half-deleted corpus directory that a create of the same name would reopen."""
        # Processes that have the corpus open learn of a drop only through the store's
        # change counter; a drop killed between marking the store and bumping it would
        # leave them answering from the deleted store. Bumped again here (the mapped
        # counter stays shared after the rename and the delete).
        announce_change_at(directory / "store.sqlite3")
        tombstone = directory.with_name(f"{_TOMBSTONE}{name}-{uuid.uuid4().hex}")
        os.rename(directory, tombstone)
        self._sweep_dropped(directory.parent)
        self.metrics.forget(name)

    @staticmethod
    def _sweep_dropped(corpora: Path) -> None:
        """Delete dropped corpora's renamed directories: this drop's, and any a drop
        killed part-way left (swept at drops and creates, which hold the root's lock)."""
        for leftover in corpora.glob(f"{_TOMBSTONE}*"):
            shutil.rmtree(leftover, ignore_errors=True)

    @sealed
    def switch_embedder(
        self,
        name: str,
        embedder: EmbedderSpec | str,
        *,
        batch_size: int = 256,
        progress: bool | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Give corpus ``name`` another embedder (model or dimension) and re-embed everything.

        Deliberate and total: every vector is dropped, the new embedder is saved in the
        corpus's config, and every document is re-embedded in batches (``progress`` shows
        a bar, ``on_progress(done, total)`` reports each batch). Searches keep answering
        from keyword search meanwhile. Returns how many were re-embedded; documents the
        provider failed on stay degraded and heal through ``repair`` or the repairer.
        """
        corpus = self.corpus(name)
        if embedder is None:
            raise InvalidArgument("switch_embedder needs an embedder; None turns vectors off")
        try:
            config = CorpusConfig.model_validate(
                {**corpus.config.model_dump(), "embedder": embedder}
            )
        except ValueError as exc:
            raise InvalidArgument(f"invalid embedder spec: {exc}") from exc
        if config.embedder is None:
            raise InvalidArgument("switch_embedder needs an embedder; None turns vectors off")
        try:
            with self._embedders.pinned(config.embedder) as instance:
                return corpus.switch_embedder(
                    config,
                    instance,
                    batch_size=batch_size,
                    progress=progress,
                    on_progress=on_progress,
                )
        finally:
            with self._lock:  # the model switched away from, if no other corpus uses it
                self._embedders.keep_only(self._specs_in_use())

    def _specs_in_use(self) -> list[EmbedderSpec]:
        """The embedder specs of the corpora this engine has open (engine lock held)."""
        return [c.config.embedder for c in self._corpora.values() if c.config.embedder]

    # -- operations -----------------------------------------------------------------------

    def serve_metrics(self, host: str = "127.0.0.1", port: int = 0) -> MetricsServer:
        """Serve this engine's metrics at ``http://host:port/metrics`` (and ``/healthz``).

        ``port=0`` lets the OS pick (read ``.port`` / ``.url`` on the returned handle).
        The endpoint covers every corpus of the directory (each scrape opens one another
        process created since); it stops with ``.stop()`` or when the engine closes.
        """
        self._check_open()
        from engine.surfaces.metrics_http import serve_metrics

        server = serve_metrics(self.registry, host, port, healthy=lambda: not self._closed)
        with self._lock:
            if self._closing:  # close() began meanwhile: it will not see this server
                server.stop()
                raise InvalidArgument("this SearchEngine is closing")
            # Stopped ones are let go here (each start adds one; nothing else prunes).
            self._servers = [s for s in self._servers if s.running] + [server]
        return server

    def start_repairer(
        self, *, interval_s: float = 30.0, batch_size: int = 64
    ) -> BackgroundRepairer:
        """Start the background repairer over every corpus of the directory (one at a
        time; each pass opens those not open yet, one another process created included).

        Each pass re-embeds at most ``batch_size`` degraded documents per corpus. It stops
        with ``.stop()`` or when the engine closes.
        """
        self._check_open()
        if self._read_only:
            raise EngineReadOnly("a read-only engine repairs nothing")
        with self._lock:
            if self._closing:
                raise InvalidArgument("this SearchEngine is closing")
            if self._repairer is not None and self._repairer.running:
                raise InvalidArgument("a background repairer is running already")
            self._repairer = BackgroundRepairer(
                self._every_corpus, interval_s=interval_s, batch_size=batch_size
            )
            self._repairer.start()
            return self._repairer

    def _open_corpora(self) -> list[Corpus]:
        with self._lock:
            return [] if self._closed else list(self._corpora.values())

    def _every_corpus(self) -> list[Corpus]:
        """Every corpus of the directory, opened: the repairer and the gauges cover them
        all, not only those a caller happened to open (one another process created since
        included). One dropped or unreadable meanwhile is skipped."""
        try:
            names = self.list_corpora()
        except (EngineError, OSError):  # closed meanwhile
            return []
        corpora = []
        for name in names:
            try:
                corpora.append(self.corpus(name))
            except Exception as exc:
                # An unreadable config, an embedder factory that refuses its spec, a drop:
                # one corpus must not end the repairer or fail every scrape. Said once per
                # corpus, not at every scrape; types only: messages may quote files.
                with self._lock:
                    first = name not in self._unopenable
                    self._unopenable.add(name)
                logger.log(
                    logging.WARNING if first else logging.DEBUG,
                    "corpus %s not opened (%s); skipped",
                    name,
                    type(exc).__name__,
                )
            else:
                with self._lock:
                    self._unopenable.discard(name)
        return corpora

    def _refresh_metrics(self) -> None:
        """Re-read every corpus's state gauges (run by the metrics refresher), and ask
        their embedders whether they are up (off this thread, ``HealthChecks``)."""
        self._every_corpus()  # opening a corpus publishes its gauges
        for corpus in self._open_corpora():
            try:
                if corpus.is_current():
                    corpus.refresh_metrics()
                else:  # dropped by another process: reopened (re-created) or forgotten
                    self.corpus(corpus.name)
            except (EngineError, sqlite3.Error) as exc:  # closed or dropped meanwhile
                logger.debug("gauges of corpus %s not refreshed (%s)", corpus.name, type(exc))
        self._health_checks.run(
            [(c.name, c._check_embedder) for c in self._open_corpora() if c.config.embedder]
        )

    # -- lifecycle ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument("this SearchEngine is closed")

    def _check_not_closing(self) -> None:
        self._check_open()
        if self._closing:
            raise InvalidArgument("this SearchEngine is closing")

    @sealed
    def close(self) -> None:
        """Flush indexes, close every corpus and release the directory lock."""
        with self._lock:
            self._closing = True  # no repairer or metrics server may start from here on
            repairer, self._repairer = self._repairer, None
            servers, self._servers = self._servers, []
        # Outside the lock: these threads may be waiting for it.
        if repairer is not None:
            repairer.stop()
        for server in servers:
            server.stop()
        self.metrics.close()  # waits for a scrape's refresh, which may need self._lock
        self._health_checks.close()  # a check still asking a provider, a bounded while
        # The root's lock first, as a create or drop takes it: one in progress — past its
        # closing check, writing its corpus — finishes first (both hold it while waiting
        # for other processes, at most ``busy_timeout``), and one that comes later finds
        # the engine closing. Taken the other way round (the engine's lock, then the
        # root's), a drop waiting for a writer and a close waited for each other for good;
        # taken not at all, a create could commit its corpus and then report failure.
        root = self._engine_lock
        first_error: BaseException | None = None
        with root.mutex if root is not None else contextlib.nullcontext(), self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                for corpus in self._corpora.values():
                    try:
                        corpus.close()
                    except Exception as exc:  # close the rest, then report the first
                        first_error = first_error or exc
                self._corpora.clear()
                self._embedders.close()
            finally:
                if root is not None:
                    root.close()
        if first_error is not None:
            raise first_error

    def __enter__(self) -> SearchEngine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _read_config(name: str, path: Path) -> CorpusConfig:
    """A corpus's config as its file holds it; ``StorageError`` naming the file when the
    file is damaged (not UTF-8, not JSON, not a config) instead of the parser's own
    exception, which no caller catching ``EngineError`` saw."""
    try:
        return CorpusConfig.model_validate(json.loads(path.read_text("utf-8")), context=STORED)
    except ValueError as exc:  # JSON, UTF-8 and pydantic's errors are all ValueErrors
        what = type(exc).__name__
        if isinstance(exc, pydantic.ValidationError):
            first = exc.errors(include_input=False)[0]  # a value may hold credentials
            what = f"{'.'.join(map(str, first['loc'])) or 'the config'}: {first['type']}"
        raise StorageError(
            f"corpus {name!r}: {path.name} cannot be read ({what}); restore it from a "
            "backup — its documents are in the store beside it"
        ) from None
