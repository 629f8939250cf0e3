"""``ShardedCorpus``: one corpus spread over shard actors, with the face of ``Corpus``.

Documents are routed to shards by a stable hash of their id (``engine.cluster.routing``);
each shard is a Ray actor owning an ordinary engine directory (``engine.cluster.shard``).
This object is the coordinator: it validates, embeds (documents and queries — each query
once, never once per shard), routes, merges and fuses.

One search: clamp the inputs exactly as ``Corpus.search`` does; embed the query here; ask
every shard that is up for its keyword window and its vector window *with scores*; merge
each arm across shards by score into one global ranking; fuse the two global rankings
with one ``fusion.rrf`` (``engine.cluster.merge``). A passage's ranks are its global
ranks. BM25 statistics are each shard's own (as in Elasticsearch's default
``query_then_fetch``). A shard that is down is left out: the answer comes from the
others, with no error and no flag, and the outage shows in ``tandem_shards_up``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt
import ray
from prometheus_client import CollectorRegistry
from tqdm import tqdm

from dense import Embedder, EmbedderUnavailable, embed_query
from engine.cluster.calls import Handle, ShardCalls, probe
from engine.cluster.errors import ShardUnavailable
from engine.cluster.health import ClusterMetrics, Operation, ShardHealth
from engine.cluster.manifest import ClusterManifest, read_manifest, write_manifest
from engine.cluster.merge import dedupe_urls, fuse, merge_arm
from engine.cluster.options import ClusterOptions
from engine.cluster.routing import group_by_shard, shard_for
from engine.cluster.runtime import NAMESPACE, start_local_cluster
from engine.cluster.shard import EmbedderFactory, ShardActor, ShardInfo, ShardSpec
from engine.cluster.wire import to_row
from engine.config import CorpusConfig
from engine.documents import AddResult, ArmRanks, Document, GrepMatch, Passage, SourceText
from engine.embedders import default_embedder_factory
from engine.errors import GrepTimeout, InvalidArgument, SourceNotFound
from engine.filters import Filter, compile_filter
from engine.limits import MAX_GREP_MATCHES, MAX_LANGUAGE_ID, MAX_OFFSET, MAX_TOP_K
from engine.search.searcher import clamp_int
from engine.search.sources import compile_pattern, evidence_text
from engine.search.windows import ArmWindows
from engine.write.batches import checked_documents, checked_ids
from engine.write.ingest import content_hash, embedding_text
from engine.write.vector_model import check_embedding_model
from fusion import FusedHit
from sparse import MAX_SOURCES, FieldFilter
from sparse.clamp import clamp_language, clamp_text

logger = logging.getLogger(__name__)

_EMBED_CHUNK = 512
_PROGRESS_MIN = 2_000


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
      from one corpus holding every document.

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
    ) -> None:
        self._root = root
        self._manifest = manifest
        self._config = manifest.config
        self._embedder = embedder
        self._options = options
        self.metrics = metrics
        self._health = ShardHealth(
            self._config.name,
            manifest.shards,
            metrics,
            lambda indexes, timeout: probe(handles, indexes, timeout),
            probe_interval_s=options.probe_interval_s,
            probe_timeout_s=options.probe_timeout_s,
        )
        self._calls = ShardCalls(self._config.name, handles, self._health, metrics)
        self._closed = False
        self._lock = threading.Lock()

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
        """Create a sharded corpus in ``root`` (a new directory, or an empty one).

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
            )
        except ValueError as exc:
            raise InvalidArgument(f"invalid sharded corpus: {exc}") from exc
        path = Path(root)
        write_manifest(path, manifest)
        return cls._start(path, manifest, embedder_factory, options, registry)

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
        path = Path(root)
        return cls._start(path, read_manifest(path), embedder_factory, options, registry)

    @classmethod
    def _start(
        cls,
        root: Path,
        manifest: ClusterManifest,
        factory: EmbedderFactory | None,
        options: ClusterOptions | None,
        registry: CollectorRegistry | None,
    ) -> ShardedCorpus:
        opts = options or ClusterOptions()
        if not ray.is_initialized():
            start_local_cluster()
        handles = [
            _shard_actor(root, manifest, index, factory, opts) for index in range(manifest.shards)
        ]
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
        embedder = None if spec is None else (factory or default_embedder_factory)(spec)
        return cls(root, manifest, handles, embedder, opts, ClusterMetrics(registry))

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

    def search(
        self,
        query: str,
        top_k: int = 10,
        offset: int = 0,
        language_id: int | None = None,
        *,
        filters: Filter | Mapping[str, object] | str | None = None,
    ) -> list[Passage]:
        """The best public passages for ``query``, best first — as ``Corpus.search``.

        Answers from the shards that are up; a shard that fails mid-search is left out.
        """
        compiled = compile_filter(filters, self._config.fields)
        started = time.perf_counter()
        text = clamp_text(query)
        if text is None:
            return []
        k = clamp_int(top_k, 1, MAX_TOP_K, 10)
        skip = clamp_int(offset, 0, MAX_OFFSET, 0)
        language = clamp_language(language_id)
        if language is not None and language > MAX_LANGUAGE_ID:
            return []
        need = skip + k
        vector = self._query_vector(text)
        window = min(max(self._config.window, need), MAX_SOURCES) if vector is not None else need
        targets = self._health.up()
        answers: dict[int, ArmWindows] = self._calls.fan_out(
            targets,
            "windows",
            lambda _: (text, vector, need, window, language, compiled),
            self._options.search_timeout_s,
        )
        if len(answers) < self.shards:
            self.metrics.partial_searches.labels(self.name).inc()
        ordered = [answers[i] for i in sorted(answers)]
        sparse = merge_arm([a.sparse for a in ordered], sum(len(a.sparse) for a in ordered))
        sparse = dedupe_urls(sparse, window)
        dense = None if vector is None else merge_arm([a.dense for a in ordered], window)
        weights = (self._config.weights.sparse, self._config.weights.dense)
        fused = fuse(sparse, dense, k=self._config.rrf_k, weights=weights, limit=need)
        passages = self._page(fused[skip:need], answers, text, compiled)
        self.metrics.search_duration.labels(self.name).observe(time.perf_counter() - started)
        return passages

    def _query_vector(self, text: str) -> npt.NDArray[np.float32] | None:
        """The query's vector, embedded once here; ``None``: answer from keywords."""
        embedder = self._embedder
        if embedder is None or not embedder.is_available():
            return None
        try:
            return embed_query(embedder, text)
        except EmbedderUnavailable:
            return None

    def _page(
        self,
        page: Sequence[FusedHit],
        answers: Mapping[int, ArmWindows],
        text: str,
        filters: tuple[FieldFilter, ...],
    ) -> list[Passage]:
        """Passages for the fused page: the shards sent most of them with their windows;
        the rest come from their owners in one more round trip."""
        ready = {p.source_id: p for a in answers.values() for p in a.passages}
        checked = {sid for a in answers.values() for sid in a.checked}
        missing = [f.id for f in page if f.id not in checked]
        if missing:
            owners = group_by_shard(missing, self.shards)
            extra = self._calls.fan_out(
                [i for i in owners if i in answers],
                "passages",
                lambda i: ([missing[p] for p in owners[i]], text, filters),
                self._options.search_timeout_s,
            )
            ready.update({p.source_id: p for found in extra.values() for p in found})
        out: list[Passage] = []
        for hit in page:
            passage = ready.get(hit.id)
            if passage is None:  # not public, deleted meanwhile, or its shard went away
                continue
            out.append(
                dataclasses.replace(
                    passage,
                    score=hit.score,
                    ranks=ArmRanks(sparse=hit.ranks[0], dense=hit.ranks[1]),
                )
            )
        return out

    def evidence(self, question: str, top_k: int = 5) -> str:
        """A text package of the best sources for an LLM prompt (empty string: none)."""
        return evidence_text(self.search(question, top_k=top_k))

    def fetch_source(self, source_id: str) -> SourceText:
        """The full text of one public source, capped — as ``Corpus.fetch_source``.

        Waits (up to ``read_timeout_s``) for the owning shard if it is down, then raises
        ``ShardUnavailable``.
        """
        from engine.limits import is_valid_source_id

        if not is_valid_source_id(source_id):
            raise InvalidArgument(
                "source id must be 1-256 characters: an ASCII letter or digit, then letters, "
                "digits or ._:@#/+=~-"
            )
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

    def grep(self, pattern: str, limit: int = 20, *, fixed: bool = False) -> list[GrepMatch]:
        """Regex (or fixed-text) matches in public sources' text — as ``Corpus.grep``,
        ordered by source id then position. Every shard is read (a down shard is waited
        for, then ``ShardUnavailable``); a shard out of time budget raises ``GrepTimeout``
        with the matches found."""
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
        self._check_open()
        docs, supplied = checked_documents(
            documents,
            self._config.fields,
            embeddings,
            vectors_enabled=self._embedder is not None,
        )
        check_embedding_model(
            embedding_model,
            self._model_names(),
            self.name,
            has_embeddings=supplied is not None,
        )
        if supplied is None and self._embedder is not None:
            supplied, embedding_model = self._embed_new(docs), self._embedder.name
        groups = group_by_shard([d.id for d in docs], self.shards)
        show = progress if progress is not None else len(docs) >= _PROGRESS_MIN
        bar = tqdm(total=len(docs), disable=not show, desc=f"add {self.name}", unit="doc")
        bar_lock = threading.Lock()

        def write(index: int) -> AddResult:
            totals = [0, 0, 0, 0]
            positions = groups[index]
            for start in range(0, len(positions), self._options.write_batch):
                chunk = positions[start : start + self._options.write_batch]
                counts = self._write_chunk(
                    index, [docs[p] for p in chunk], supplied, chunk, embedding_model
                )
                totals = [a + b for a, b in zip(totals, counts, strict=True)]
                with bar_lock:
                    bar.update(len(chunk))
            return AddResult(*totals)

        with bar:
            results = self._each_shard(sorted(groups), write)
        return AddResult(
            added=sum(r.added for r in results),
            updated=sum(r.updated for r in results),
            unchanged=sum(r.unchanged for r in results),
            degraded=sum(r.degraded for r in results),
        )

    def _write_chunk(
        self,
        index: int,
        docs: Sequence[Document],
        supplied: npt.NDArray[np.float32] | None,
        positions: Sequence[int],
        model: str | None,
    ) -> tuple[int, int, int, int]:
        rows = [to_row(d) for d in docs]
        if supplied is None:
            return self._write(index, rows, None, None)
        vectors = supplied[list(positions)]
        keep = ~np.isnan(vectors[:, 0])
        if keep.all():
            return self._write(index, rows, vectors, model)
        # Documents the shard holds unchanged keep their stored vectors (no model call),
        # as do documents the embedder failed on (stored degraded by the shard).
        counts = [0, 0, 0, 0]
        with_vectors = [r for r, k in zip(rows, keep, strict=True) if k]
        without = [r for r, k in zip(rows, keep, strict=True) if not k]
        if with_vectors:
            part = self._write(index, with_vectors, vectors[keep], model)
            counts = [a + b for a, b in zip(counts, part, strict=True)]
        part = self._write(index, without, None, None)
        return tuple(a + b for a, b in zip(counts, part, strict=True))  # type: ignore[return-value]

    def _write(
        self,
        index: int,
        rows: list[dict[str, Any]],
        vectors: npt.NDArray[np.float32] | None,
        model: str | None,
    ) -> tuple[int, int, int, int]:
        payload = ray.put(rows)  # sent again as is if the shard has to be retried
        result: tuple[int, int, int, int] = self._calls.call(
            index,
            "add",
            payload,
            vectors,
            model,
            timeout_s=self._options.write_timeout_s,
            operation=Operation.WRITE,
        )
        return result

    def _embed_new(self, docs: Sequence[Document]) -> npt.NDArray[np.float32] | None:
        """Vectors for ``docs``; rows of NaN for documents a shard already holds with the
        same content and a vector (they keep theirs) or that the embedder failed on."""
        assert self._embedder is not None
        if not docs:
            return None
        states = self._content_state([d.id for d in docs])
        todo = [i for i, d in enumerate(docs) if states.get(d.id) != (content_hash(d), True)]
        dimension = self._embedder.dimension if todo else 1
        out = np.full((len(docs), dimension), np.nan, dtype=np.float32)
        for start in range(0, len(todo), _EMBED_CHUNK):
            chunk = todo[start : start + _EMBED_CHUNK]
            try:
                if not self._embedder.is_available():
                    break
                out[chunk] = self._embedder.embed(
                    [embedding_text(docs[i].title, docs[i].text) for i in chunk]
                )
            except EmbedderUnavailable as exc:
                logger.warning(
                    "embedding %d documents failed (%s); their shards store them degraded",
                    len(chunk),
                    type(exc).__name__,
                )
        return out

    def _content_state(self, ids: Sequence[str]) -> dict[str, tuple[str, bool]]:
        groups = group_by_shard(ids, self.shards)

        def ask(index: int) -> dict[str, tuple[str, bool]]:
            state: dict[str, tuple[str, bool]] = self._calls.call(
                index,
                "content_state",
                [ids[p] for p in groups[index]],
                timeout_s=self._options.write_timeout_s,
                operation=Operation.WRITE,
            )
            return state

        merged: dict[str, tuple[str, bool]] = {}
        for part in self._each_shard(sorted(groups), ask):
            merged.update(part)
        return merged

    def delete(self, ids: Iterable[str]) -> int:
        """Delete documents by id; returns how many existed. Unknown ids are ignored."""
        self._check_open()
        wanted = checked_ids(ids)
        groups = group_by_shard(wanted, self.shards)

        def remove(index: int) -> int:
            deleted: int = self._calls.call(
                index,
                "delete",
                [wanted[p] for p in groups[index]],
                timeout_s=self._options.write_timeout_s,
                operation=Operation.WRITE,
            )
            return deleted

        return sum(self._each_shard(sorted(groups), remove))

    # -- operations -----------------------------------------------------------------------

    def health(self) -> list[bool]:
        """Probe every shard now; ``[True, False, ...]`` per shard (also updates metrics)."""
        self._health.probe_all()
        up = set(self._health.up())
        return [i in up for i in range(self.shards)]

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

    def stats(self) -> dict[str, Any]:
        per_shard = self._on_every_shard("stats")
        totals = {
            key: sum(int(s[key]) for s in per_shard)
            for key in ("documents", "degraded", "vectors", "index_bytes")
        }
        return {**totals, "shards": self.shards, "per_shard": per_shard}

    def repair(self, batch_size: int = 256) -> int:
        """Re-embed degraded documents on every shard (with each shard's embedder)."""
        return sum(self._on_every_shard("repair", batch_size))

    def flush(self) -> None:
        self._on_every_shard("flush")

    def serve_metrics(self, host: str = "127.0.0.1", port: int = 0) -> Any:
        """Serve the coordinator's metrics at ``http://host:port/metrics`` (see
        ``engine.surfaces.metrics_http``); ``.stop()`` the returned server."""
        from engine.surfaces.metrics_http import serve_metrics

        return serve_metrics(self.registry, host, port, healthy=lambda: not self._closed)

    def _on_every_shard(self, method: str, *args: Any) -> list[Any]:
        def one(index: int) -> Any:
            return self._calls.call(
                index,
                method,
                *args,
                timeout_s=self._options.read_timeout_s,
                operation=Operation.READ,
            )

        return self._each_shard(list(range(self.shards)), one)

    def _each_shard(self, indexes: Sequence[int], work: Any) -> list[Any]:
        """Run ``work(index)`` for every shard in parallel; every shard's work finishes
        before the first error (if any) is raised, so no write is left half-sent."""
        if not indexes:
            return []
        with ThreadPoolExecutor(max_workers=len(indexes)) as pool:
            futures = [pool.submit(work, i) for i in indexes]
        errors = [f.exception() for f in futures if f.exception() is not None]
        unavailable = [e for e in errors if isinstance(e, ShardUnavailable)]
        if unavailable and len(unavailable) == len(errors):
            shards = tuple(sorted(s for e in unavailable for s in e.shards))
            message = "; ".join(str(e) for e in unavailable)
            raise ShardUnavailable(message, shards) from unavailable[0]
        if errors:
            raise errors[0]  # type: ignore[misc]
        return [f.result() for f in futures]

    def _model_names(self) -> list[str]:
        names = [] if self._embedder is None else [self._embedder.name]
        spec = self._config.embedder
        if spec is not None:
            names.append(spec.model)
        return names

    # -- lifecycle ------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument("this ShardedCorpus is closed")

    def close(self) -> None:
        """Flush and stop the shards (detached shards keep running), stop the prober."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._health.close()
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
        close = getattr(self._embedder, "close", None)
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


def stop_detached(root: str | os.PathLike[str]) -> int:
    """Stop the detached shard actors of the sharded corpus in ``root``; returns how many."""
    manifest = read_manifest(Path(root))
    stopped = 0
    for index in range(manifest.shards):
        try:
            handle = ray.get_actor(_actor_name(manifest, index), namespace=NAMESPACE)
        except ValueError:
            continue
        try:
            ray.get(handle.close.remote(), timeout=30)
        except Exception as exc:
            logger.warning("closing shard %d failed (%s)", index, type(exc).__name__)
        ray.kill(handle, no_restart=True)
        stopped += 1
    return stopped


def _actor_name(manifest: ClusterManifest, index: int) -> str:
    return f"{manifest.config.name}-shard-{index:03d}"


def _shard_actor(
    root: Path,
    manifest: ClusterManifest,
    index: int,
    factory: EmbedderFactory | None,
    opts: ClusterOptions,
) -> Handle:
    spec = ShardSpec(
        index=index,
        directory=str(manifest.shard_directory(root, index)),
        config=manifest.config,
        embedder_factory=factory,
        lock_wait_s=opts.lock_wait_s,
    )
    options: dict[str, Any] = {
        "max_restarts": opts.max_restarts,
        "max_task_retries": 0,  # the coordinator retries (writes) or moves on (searches)
        "max_concurrency": opts.max_concurrency,
        "num_cpus": opts.shard_num_cpus,
    }
    if manifest.placement is not None:
        options["resources"] = {manifest.placement[index]: 0.001}
    if opts.detached:
        options.update(
            name=_actor_name(manifest, index),
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
        )
    return ray.remote(ShardActor).options(**options).remote(spec)
