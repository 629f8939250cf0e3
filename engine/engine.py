"""``SearchEngine``: an embedded engine rooted in one directory, holding named corpora.

Layout: ``<root>/corpora/<name>/`` holds ``config.json``, the SQLite store and the
derived indexes. Corpus names follow a strict grammar, so none can escape the root.
One process at a time may open a root (an exclusive lock file); a second gets
``EngineLocked`` instead of a chance to corrupt it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import threading
from pathlib import Path
from types import TracebackType
from typing import IO

from prometheus_client import CollectorRegistry

from engine.config import CorpusConfig
from engine.corpus import Corpus
from engine.embedders import EmbedderFactory, EmbedderPool
from engine.errors import CorpusExists, CorpusNotFound, EngineLocked, InvalidArgument
from engine.limits import is_valid_corpus_name
from engine.metrics import EngineMetrics

logger = logging.getLogger(__name__)


class SearchEngine:
    """Embedded, persistent hybrid search over named corpora.

    Args:
        path: the engine's directory (created if missing).
        embedder_factory: builds an ``Embedder`` from a corpus's embedder spec; the
            default builds sentence-transformers or Ollama providers. One instance per
            distinct spec is shared by all corpora.
        registry: the Prometheus registry to register metrics on (default: a fresh one
            owned by this engine; nothing is registered globally).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        embedder_factory: EmbedderFactory | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self._root = Path(path)
        (self._root / "corpora").mkdir(parents=True, exist_ok=True)
        self._lock_file: IO[str] | None = self._take_lock()
        self.metrics = EngineMetrics(registry)
        self._embedders = EmbedderPool(embedder_factory)
        self._corpora: dict[str, Corpus] = {}
        self._lock = threading.RLock()
        self._closed = False

    def _take_lock(self) -> IO[str]:
        handle = open(self._root / ".lock", "a+", encoding="utf-8")  # noqa: SIM115
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            handle.close()
            raise EngineLocked(
                f"{self._root} is open in another SearchEngine (this or another process)"
            ) from exc
        return handle

    @property
    def path(self) -> Path:
        return self._root

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

    def list_corpora(self) -> list[str]:
        self._check_open()
        base = self._root / "corpora"
        return sorted(
            p.name
            for p in base.iterdir()
            if p.is_dir() and (p / "config.json").is_file() and is_valid_corpus_name(p.name)
        )

    def create_corpus(self, config: CorpusConfig) -> Corpus:
        """Create and open a new corpus. Raises ``CorpusExists`` if the name is taken."""
        self._check_open()
        if not isinstance(config, CorpusConfig):
            raise InvalidArgument("create_corpus takes an engine.CorpusConfig")
        with self._lock:
            directory = self._corpus_dir(config.name)
            if (directory / "config.json").exists():
                raise CorpusExists(f"corpus {config.name!r} already exists")
            directory.mkdir(parents=True, exist_ok=True)
            tmp = directory / "config.json.tmp"
            tmp.write_text(config.model_dump_json(indent=2), encoding="utf-8")
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, directory / "config.json")
            return self._open(config, directory)

    def corpus(self, name: str) -> Corpus:
        """Open an existing corpus (the same object on every call)."""
        self._check_open()
        with self._lock:
            if name in self._corpora:
                return self._corpora[name]
            directory = self._corpus_dir(name)
            config_path = directory / "config.json"
            if not config_path.is_file():
                raise CorpusNotFound(f"no corpus named {name!r}")
            config = CorpusConfig.model_validate(json.loads(config_path.read_text("utf-8")))
            return self._open(config, directory)

    def _open(self, config: CorpusConfig, directory: Path) -> Corpus:
        embedder = None if config.embedder is None else self._embedders.get(config.embedder)
        corpus = Corpus(directory, config, embedder, self.metrics)
        self._corpora[config.name] = corpus
        return corpus

    def drop_corpus(self, name: str) -> None:
        """Delete a corpus and everything in it. Raises ``CorpusNotFound``."""
        self._check_open()
        with self._lock:
            directory = self._corpus_dir(name)
            if not (directory / "config.json").is_file():
                raise CorpusNotFound(f"no corpus named {name!r}")
            corpus = self._corpora.pop(name, None)
            if corpus is not None:
                corpus.close()
            (directory / "config.json").unlink()
            shutil.rmtree(directory, ignore_errors=True)
            self.metrics.forget(name)

    # -- lifecycle ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument("this SearchEngine is closed")

    def close(self) -> None:
        """Flush indexes, close every corpus and release the directory lock."""
        with self._lock:
            if self._closed:
                return
            for corpus in self._corpora.values():
                corpus.close()
            self._corpora.clear()
            self._embedders.close()
            if self._lock_file is not None:
                fcntl.flock(self._lock_file.fileno(), fcntl.LOCK_UN)
                self._lock_file.close()
                self._lock_file = None
            self._closed = True

    def __enter__(self) -> SearchEngine:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
