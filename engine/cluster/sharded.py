"""``ShardedCorpus``: one corpus spread over shard actors, with the face of ``Corpus``.

Documents are routed to shards by a stable hash of their id (``engine.cluster.routing``);
each shard is a Ray actor owning an ordinary engine directory (``engine.cluster.shard``).
This object is the coordinator: it validates, embeds (documents and queries — each query
once, never once per shard), routes, merges and fuses.

One search: clamp the inputs exactly as ``Corpus.search`` does; embed the query here; ask
every shard that is up for its keyword window and its vector window *with scores*; merge
each arm across shards by score into one global ranking; fuse the two global rankings
with one ``fusion.rrf`` (``engine.cluster.merge``). A passage's ranks are its global
ranks. BM25 statistics are each shard's own (Elasticsearch's default,
``query_then_fetch``) unless ``ClusterOptions.global_term_statistics`` sums each query
term's document frequency over the shards first (``dfs_query_then_fetch``). A
shard that is down is left out: the answer comes from the
others, with no error and no flag, and the outage shows in ``tandem_shards_up``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import ray
from prometheus_client import CollectorRegistry
from ray.exceptions import RayError

from dense import Embedder
from engine.cluster.actors import start_shard
from engine.cluster.calls import Handle, ShardCalls
from engine.cluster.errors import ClusterError
from engine.cluster.health import ClusterMetrics, Operation, ShardHealth
from engine.cluster.manifest import (
    MANIFEST_NAME,
    ClusterManifest,
    read_manifest,
    write_manifest,
)
from engine.cluster.options import ClusterOptions
from engine.cluster.routing import shard_for
from engine.cluster.runtime import start_local_cluster
from engine.cluster.search import ShardedSearcher
from engine.cluster.shard import EmbedderFactory, ShardInfo
from engine.cluster.writes import CorpusDimension, ShardWriter, on_each
from engine.config import CorpusConfig
from engine.dimension_guard import DimensionGuard
from engine.documents import AddResult, Document, GrepMatch, Passage, SourceText
from engine.embedders import build_embedder
from engine.errors import GrepTimeout, InvalidArgument, SourceNotFound, StorageError
from engine.filters import FilterInput, compile_filter
from engine.lifetime import Lifetime, in_lifetime
from engine.limits import MAX_GREP_MATCHES, clamp_int
from engine.search.sources import compile_pattern, evidence_text
from engine.write.batches import checked_documents, checked_ids
from engine.write.vector_model import check_embedding_model, check_vector_dimension

logger = logging.getLogger(__name__)

_EMBED_CHUNK = 512
_PROGRESS_MIN = 2_000


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_RAISED = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Missing|Unavailable)): (.+)$")


def _root_cause(exc: BaseException) -> str:
    """What a Ray error says went wrong, as one line: the last ``SomeError: message`` line
    of the traceback Ray wraps a shard's own exception in (an actor that died in its
    constructor, say), else the start of Ray's message."""
    text = _ANSI.sub("", str(exc))
    causes = [m for line in text.splitlines() if (m := _RAISED.match(line.strip()))]
    if causes:
        name, message = causes[-1].groups()
        return f"{name}: {message}"[:500]
    return text[:300]


class ShardedCorpus:
    """A corpus sharded over Ray actors. Obtain one with ``create`` or ``open``.

    Same methods, arguments, clamping and answers as ``engine.Corpus`` for ``add``,
    ``delete``, ``search``, ``evidence``, ``fetch_source`` and ``grep`` (see
    ``engine.SearchableCorpus``), with these differences, all documented:

    - a write whose shard stays down past ``ClusterOptions.write_timeout_s`` raises
      ``ShardUnavailable`` (documents on the other shards are stored; send the batch
      again — ``add`` is an idempotent upsert);
    - ``grep`` orders matches by source id, then position (one corpus: by insertion);
    - BM25 statistics are per shard, so keyword scores (not just ranks) differ slightly
      from one corpus holding every document, unless
      ``ClusterOptions.global_term_statistics`` sums each term's document frequency
      over the shards (length normalisation stays per shard either way).

    Thread-safety: like ``Corpus`` — any number of threads may search while others write.
    """

    def __init__(
        self,
        root: Path,
        manifest: ClusterManifest,
        handles: Sequence[Handle],
        embedder: Embedder | None,
        options: ClusterOptions,
        metrics: ClusterMetrics,
        *,
        dimension: int | None = None,
    ) -> None:
        """``embedder``: the coordinator's own, unguarded (it is wrapped here);
        ``dimension``: the length of the vectors the shards hold, if known."""
        self._root = root
        self._manifest = manifest
        self._config = manifest.config
        self._options = options
        self.metrics = metrics
        self._servers: list[Any] = []  # metrics servers started here, stopped at close
        self._servers_lock = threading.Lock()
        # Every vector the coordinator embeds — documents and queries — is checked against
        # the corpus's stored length, as one corpus checks its own (``DimensionGuard``):
        # bad output is provider trouble, so documents are stored degraded and a search
        # answers from keywords.
        self._dimension = CorpusDimension(self._stored_dimension, dimension)
        self._unguarded = embedder
        self._embedder: Embedder | None = (
            None if embedder is None else DimensionGuard(embedder, self._dimension)
        )
        embedder = self._embedder
        self._health = ShardHealth(
            self._config.name,
            manifest.shards,
            metrics,
            lambda indexes, timeout: self._calls.probe(indexes, timeout),
            probe_interval_s=options.probe_interval_s,
            probe_timeout_s=options.probe_timeout_s,
        )
        self._calls = ShardCalls(self._config.name, handles, self._health, metrics)
        self._searcher = ShardedSearcher(
            self._config,
            manifest.shards,
            embedder,
            self._calls,
            self._health,
            metrics,
            timeout_s=options.search_timeout_s,
            global_statistics=options.global_term_statistics,
            query_embed_timeout_s=options.query_embed_timeout_s,
        )
        self._writer = ShardWriter(
            self._config.name,
            manifest.shards,
            self._calls,
            embedder,
            write_batch=options.write_batch,
            timeout_s=options.write_timeout_s,
            dimension=self._dimension,
        )
        self._lifetime = Lifetime(
            lambda: StorageError(f"sharded corpus {self._config.name!r} is closed")
        )
        self._health.probe_all()  # each shard's incarnation, so later restarts are seen

    # -- opening --------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        root: str | os.PathLike[str],
        config: CorpusConfig,
        shards: int,
        *,
        placement: Sequence[str] | None = None,
        embedder_factory: EmbedderFactory | None = None,
        options: ClusterOptions | None = None,
        registry: CollectorRegistry | None = None,
    ) -> ShardedCorpus:
        """Create a sharded corpus in ``root`` (a new directory, or an empty one: a root
        holding ``cluster.json`` raises ``ClusterExists``, any other content — say the
        shard folders of a corpus whose manifest was deleted — ``InvalidArgument``).

        ``placement`` names one Ray custom resource per shard to pin each shard's actor
        to the node whose disk holds its directory (see the README). ``embedder_factory``
        must pickle (shards build their own embedder from it); ``None``: the engine's
        default providers. Connects to Ray first if this process has not (a local
        cluster on 127.0.0.1).
        """
        if not isinstance(config, CorpusConfig):
            raise InvalidArgument("ShardedCorpus.create takes an engine.CorpusConfig")
        if isinstance(shards, bool) or not isinstance(shards, int):
            raise InvalidArgument("shards must be an integer")
        try:
            manifest = ClusterManifest(
                config=config,
                shards=shards,
                placement=None if placement is None else tuple(placement),
                uid=uuid.uuid4().hex,
            )
        except ValueError as exc:
            raise InvalidArgument(f"invalid sharded corpus: {exc}") from exc
        path = Path(root).absolute()  # shard actors have their own working directory
        if path.is_dir() and not (path / MANIFEST_NAME).exists():  # with one: ClusterExists
            leftovers = sorted(entry.name for entry in path.iterdir())
            if leftovers:
                raise InvalidArgument(
                    f"{path} is not empty (it holds {', '.join(leftovers[:5])}): a sharded "
                    "corpus is created in a new or empty directory; remove what is there "
                    "or choose another"
                )
        fresh = [
            manifest.shard_directory(path, i)
            for i in range(shards)
            if not manifest.shard_directory(path, i).exists()
        ]
        write_manifest(path, manifest)
        try:
            return cls._start(path, manifest, embedder_factory, options, registry, new=True)
        except BaseException:
            # Nothing half-made stays behind: a retried create would be refused.
            (path / MANIFEST_NAME).unlink(missing_ok=True)
            for directory in fresh:
                shutil.rmtree(directory, ignore_errors=True)
                with contextlib.suppress(OSError):  # their parent, when nothing else is there
                    directory.parent.rmdir()
            raise

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        *,
        embedder_factory: EmbedderFactory | None = None,
        options: ClusterOptions | None = None,
        registry: CollectorRegistry | None = None,
    ) -> ShardedCorpus:
        """Open the sharded corpus in ``root`` (starts or, when detached, finds its shards)."""
        path = Path(root).absolute()  # shard actors have their own working directory
        return cls._start(path, read_manifest(path), embedder_factory, options, registry)

    @classmethod
    def _start(
        cls,
        root: Path,
        manifest: ClusterManifest,
        factory: EmbedderFactory | None,
        options: ClusterOptions | None,
        registry: CollectorRegistry | None,
        *,
        new: bool = False,
    ) -> ShardedCorpus:
        """``new``: the shards were just created here, so a start that fails at any step
        stops them (an ``open`` leaves running detached shards alone: others may be using
        them)."""
        opts = options or ClusterOptions()
        if not ray.is_initialized():
            start_local_cluster()
        handles: list[Handle] = []
        missing = _missing_resources(manifest.placement)
        if missing:
            # Ray waits for a node with the resource to join (an autoscaler may add one),
            # so this is no error yet; but without a word a typo would wait in silence.
            logger.warning(
                "no node of the cluster has the resource(s) %s that placement names; "
                "their shards wait up to %g s for one to join",
                ", ".join(sorted(missing)),
                opts.start_timeout_s,
            )
        try:
            for index in range(manifest.shards):
                handles.append(start_shard(root, manifest, index, factory, opts, create=new))
            infos: list[ShardInfo] = ray.get(
                [h.info.remote() for h in handles], timeout=opts.start_timeout_s
            )
            logger.info(
                "sharded corpus %s: %d shards, %d documents",
                manifest.config.name,
                len(infos),
                sum(i.documents for i in infos),
            )
            spec = manifest.config.embedder
            embedder = None if spec is None else build_embedder(spec, factory)
            dimension = next((i.dimension for i in infos if i.dimension is not None), None)
            return cls(
                root,
                manifest,
                handles,
                embedder,
                opts,
                ClusterMetrics(registry),
                dimension=dimension,
            )
        except Exception as exc:
            if new or not opts.detached:
                for handle in handles:
                    ray.kill(handle, no_restart=True)
            if not isinstance(exc, RayError):
                raise
            hint = ""
            if missing:
                hint = f"; no node has the resource(s) {', '.join(sorted(missing))} placement names"
            raise ClusterError(
                f"the shards of {manifest.config.name!r} did not start "
                f"({type(exc).__name__}: {_root_cause(exc)}){hint}"
            ) from exc

    # -- identity -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._config.name

    @property
    def config(self) -> CorpusConfig:
        return self._config

    @property
    def shards(self) -> int:
        return self._manifest.shards

    @property
    def path(self) -> Path:
        return self._root

    @property
    def registry(self) -> CollectorRegistry:
        return self.metrics.registry

    @in_lifetime
    def __len__(self) -> int:
        return sum(
            self._calls.call(
                i, "count", timeout_s=self._options.read_timeout_s, operation=Operation.READ
            )
            for i in range(self.shards)
        )

    def __repr__(self) -> str:
        return f"ShardedCorpus(name={self.name!r}, shards={self.shards})"

    # -- reads ----------------------------------------------------------------------------

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
        """The best public passages for ``query``, best first — as ``Corpus.search``.

        Answers from the shards that are up; a shard that fails mid-search is left out.
        """
        compiled = compile_filter(filters, self._config.fields)
        return self._searcher.search(query, top_k, offset, language_id, compiled)

    @in_lifetime
    def evidence(self, question: str, top_k: int = 5) -> str:
        """A text package of the best sources for an LLM prompt (empty string: none)."""
        return evidence_text(self.search(question, top_k=top_k))

    @in_lifetime
    def fetch_source(self, source_id: str) -> SourceText:
        """The full text of one public source, capped — as ``Corpus.fetch_source``.

        Waits (up to ``read_timeout_s``) for the owning shard if it is down, then raises
        ``ShardUnavailable``.
        """
        from engine.limits import LOOKUP_SOURCE_ID_RULE, is_lookup_source_id

        if not is_lookup_source_id(source_id):
            raise InvalidArgument(f"source id must be {LOOKUP_SOURCE_ID_RULE}")
        owner = shard_for(source_id, self.shards)
        found: SourceText | None = self._calls.call(
            owner,
            "fetch",
            source_id,
            timeout_s=self._options.read_timeout_s,
            operation=Operation.READ,
        )
        if found is None:
            raise SourceNotFound(f"source {source_id!r} not found")
        return found

    @in_lifetime
    def grep(self, pattern: str, limit: int = 20, *, fixed: bool = False) -> list[GrepMatch]:
        """Regex (or fixed-text) matches in public sources' text, as ``Corpus.grep``: like
        it, not ranked, and at most ``limit`` of them — each shard's first ``limit`` in its
        own insertion order, pooled, ordered by source id then position and cut at
        ``limit`` (so not necessarily the ``limit`` smallest ids of the whole corpus, nor
        the same ``limit`` a single corpus would stop at). Every shard is read (a down
        shard is waited for, then ``ShardUnavailable``); a shard out of time budget raises
        ``GrepTimeout`` with the matches found."""
        compile_pattern(pattern, fixed=fixed)  # InvalidArgument before any shard is asked
        cap = clamp_int(limit, 1, MAX_GREP_MATCHES, 20)
        results = self._on_every_shard("grep", pattern, cap, fixed)
        matches = sorted(
            (m for found, _ in results for m in found), key=lambda m: (m.source_id, m.start)
        )[:cap]
        if any(timed_out for _, timed_out in results):
            raise GrepTimeout(
                "grep ran out of its time budget on a shard before every source was read "
                f"({len(matches)} matches so far); simplify the pattern or search fixed text",
                tuple(matches),
            )
        return matches

    # -- writes ---------------------------------------------------------------------------

    @in_lifetime
    def add(
        self,
        documents: Iterable[Document],
        *,
        embeddings: object | None = None,
        embedding_model: str | None = None,
        progress: bool | None = None,
    ) -> AddResult:
        """Insert or replace documents by id — as ``Corpus.add``: every document is
        validated before anything is sent; when this returns, every document is durable
        on its shard.

        Without ``embeddings`` the coordinator embeds the documents (once; documents a
        shard already holds with the same title and text keep their vectors). A shard
        that stays down past ``write_timeout_s`` raises ``ShardUnavailable``.
        """
        docs, supplied = checked_documents(
            documents,
            self._config.fields,
            embeddings,
            vectors_enabled=self._embedder is not None,
        )
        check_embedding_model(
            embedding_model, self._model_names(), self.name, has_embeddings=supplied is not None
        )
        if supplied is not None:
            # Against the whole corpus's length, as one corpus checks: a shard holding no
            # vector yet would take any length, and the corpus would hold two.
            check_vector_dimension(supplied.shape[1], self._dimension.refresh(), self.name)
        show = progress if progress is not None else len(docs) >= _PROGRESS_MIN
        return self._writer.add(docs, supplied, embedding_model, show)

    @in_lifetime
    def delete(self, ids: Iterable[str]) -> int:
        """Delete documents by id; returns how many existed. Unknown ids are ignored."""
        return self._writer.delete(checked_ids(ids))

    # -- operations -----------------------------------------------------------------------

    @in_lifetime
    def health(self) -> list[bool]:
        """Probe every shard now; ``[True, False, ...]`` per shard (also updates metrics)."""
        self._health.probe_all()
        up = set(self._health.up())
        return [i in up for i in range(self.shards)]

    @in_lifetime
    def shard_info(self) -> list[ShardInfo | None]:
        """Each shard's process id, node and document count (``None``: did not answer)."""
        answers = self._calls.fan_out(
            list(range(self.shards)),
            "info",
            lambda _: (),
            self._options.probe_timeout_s,
            Operation.PROBE,
        )
        return [answers.get(i) for i in range(self.shards)]

    @in_lifetime
    def stats(self) -> dict[str, Any]:
        per_shard = self._on_every_shard("stats")
        totals = {
            key: sum(int(s[key]) for s in per_shard)
            for key in ("documents", "degraded", "vectors", "index_bytes")
        }
        return {**totals, "shards": self.shards, "per_shard": per_shard}

    @in_lifetime
    def repair(self, batch_size: int = 256) -> int:
        """Re-embed degraded documents on every shard (with each shard's embedder), each
        told the corpus's vector length, as a write tells it."""
        return sum(self._on_every_shard("repair", batch_size, self._dimension.refresh()))

    @in_lifetime
    def flush(self) -> None:
        self._on_every_shard("flush")

    @in_lifetime
    def serve_metrics(self, host: str = "127.0.0.1", port: int = 0) -> Any:
        """Serve the coordinator's metrics at ``http://host:port/metrics`` (see
        ``engine.surfaces.metrics_http``) until ``.stop()`` on the returned server or the
        corpus closes (as ``SearchEngine.serve_metrics``)."""
        from engine.surfaces.metrics_http import serve_metrics

        server = serve_metrics(self.registry, host, port, healthy=lambda: not self._lifetime.ended)
        with self._servers_lock:
            self._servers = [s for s in self._servers if s.running] + [server]
        return server

    def _on_every_shard(self, method: str, *args: Any) -> list[Any]:
        def one(index: int) -> Any:
            return self._calls.call(
                index,
                method,
                *args,
                timeout_s=self._options.read_timeout_s,
                operation=Operation.READ,
            )

        return on_each(list(range(self.shards)), one)

    def _stored_dimension(self) -> int | None:
        """The length of the vectors the shards that are up hold (``None``: none holds
        any, or none answered within the probe timeout)."""
        answers = self._calls.fan_out(
            self._health.up(),
            "vector_dimension",
            lambda _: (),
            self._options.probe_timeout_s,
            Operation.READ,
        )
        return next((d for _, d in sorted(answers.items()) if d is not None), None)

    def _model_names(self) -> list[str]:
        names = [] if self._embedder is None else [self._embedder.name]
        spec = self._config.embedder
        if spec is not None:
            names.append(spec.model)
        return names

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and stop the shards (detached shards keep running), stop the prober.
        New calls are refused at once; calls in flight finish first (up to
        ``read_timeout_s``; past it the last of them stops the shards as it returns)."""
        self._lifetime.end(self._release, self._options.read_timeout_s)  # once: a no-op after

    def _release(self) -> None:
        with self._servers_lock:
            servers, self._servers = self._servers, []
        for server in servers:  # a scrape after close found killed shards "up"
            server.stop()
        self._health.close()
        self._searcher.close()
        if not self._options.detached:
            handles = self._calls.handles
            refs = [h.close.remote() for h in handles]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self._options.read_timeout_s)
            for ref in ready:
                try:
                    ray.get(ref, timeout=0)
                except Exception as exc:  # a dead shard has nothing to flush
                    logger.warning("closing a shard failed (%s)", type(exc).__name__)
            for handle in handles:
                ray.kill(handle, no_restart=True)
        close = getattr(self._unguarded, "close", None)
        if callable(close):
            close()

    def __enter__(self) -> ShardedCorpus:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _missing_resources(placement: Sequence[str] | None) -> set[str]:
    """The custom resources ``placement`` names that no node of the cluster has now."""
    if not placement:
        return set()
    try:
        available: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    except Exception:  # a cluster that cannot say: nothing to warn about
        return set()
    return {name for name in placement if available.get(name, 0) <= 0}
