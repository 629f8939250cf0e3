"""Distributed ingest with Ray Data: read, embed on a pool of actors, write to the shards.

    read (JSONL / Parquet)  →  prepare + skip  →  embed (actor pool)  →  write to shards
          tasks                  tasks             one CPU (or GPU) each     tasks

- **prepare + skip** (``engine.cluster.ingest_rows``): every row becomes a ``Document``
  (``engine.surfaces.loaders`` rules: ``id`` or BEIR's ``_id``, ``title``, ``text``,
  ``url``, ``language_id``, ``access_groups``, declared fields); a row that cannot is
  counted as rejected, never fatal (``IngestReport.rejections`` keeps the first
  reasons). A row's own vector must be a flat list of finite numbers, not all zero, as
  long as the corpus's vectors. An id repeated within one batch keeps its last row, as
  ``Corpus.add`` does; across batches rows are written in no fixed order. With
  ``resume=True`` (default) rows whose id the owning shard already stores *with a
  vector* are dropped here, so a restarted job embeds and writes only the rest.
- **embed**: ``embed_actors`` actors, each holding one model, each reserving one CPU —
  or one GPU when the cluster has GPUs (``gpus_per_actor``). Rows that carry their own
  vector (``vector_column``, with ``embedding_model`` checked against the corpus's
  model) skip this stage. A batch the embedder fails on — the provider down, or output
  no corpus can use (NaN, infinite or zero rows, too few rows, another length than the
  corpus's: ``engine.dimension_guard.checked_output``) — goes on without vectors: its
  documents are written keyword-searchable and stored degraded (``repair`` embeds them
  later), never rejected as bad input and never fatal to the job.
- **write**: rows are grouped by owning shard and sent in batches; a dead shard is
  waited for and the batch sent again (the write is an idempotent upsert), so a shard
  killed mid-ingest loses nothing that was acknowledged. A batch a shard refuses
  (``InvalidArgument``) is split in halves until the refused rows stand alone; those
  are counted as rejected. A shard that stays down past
  ``write_timeout_s`` fails the job with ``ShardUnavailable``; run it again to resume.

Progress: a running count of documents written (``on_progress`` and a tqdm bar), besides
Ray Data's own progress bars (``progress=False`` silences both).
"""

from __future__ import annotations

import logging
import os
import pickle
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import ray
import ray.data
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
from tqdm import tqdm

from dense import EmbedderUnavailable
from engine.cluster.calls import reraise_engine_error
from engine.cluster.embedding import EmbeddingWorker
from engine.cluster.errors import ShardUnavailable
from engine.cluster.ingest_rows import (
    KIND,
    PAYLOAD,
    REASON,
    TEXT,
    VECTOR,
    file_lines,
    prepared_batch,
)
from engine.cluster.routing import group_by_shard
from engine.cluster.shard import EmbedderFactory
from engine.cluster.sharded import ShardedCorpus
from engine.cluster.writes import dimension_if_up
from engine.config import FieldType
from engine.dimension_guard import checked_output
from engine.embedders import default_embedder_factory
from engine.errors import InvalidArgument
from engine.surfaces.bulk import MAX_KEPT_REJECTIONS
from engine.write.vector_model import check_embedding_model

logger = logging.getLogger(__name__)

Handle = Any


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What one ingest run did. ``written`` documents were acknowledged by their shards:
    embedded, bringing their vectors, or — when the embedder failed on their batch —
    without a vector (stored degraded, as the corpus's stats count them, until ``repair``
    embeds them); ``skipped`` ones were already stored with
    the same title and text and a vector: they are sent without one, so a change of
    URL, fields or access groups still lands, and keep their stored vector. An earlier
    row of an id repeated within one batch is dropped uncounted, as ``Corpus.add`` counts
    only the last."""

    written: int
    skipped: int
    rejected: int
    seconds: float
    rejections: tuple[str, ...] = ()
    """Why rows were rejected: the first ``MAX_KEPT_REJECTIONS`` reasons to arrive (rows
    arrive in no fixed order), each led by the row's id when it had a valid one."""

    @property
    def docs_per_s(self) -> float:
        return self.written / self.seconds if self.seconds > 0 else 0.0


def ingest(
    corpus: ShardedCorpus,
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    file_format: str | None = None,
    embed_actors: int = 2,
    gpus_per_actor: float | None = None,
    batch_size: int = 256,
    resume: bool = True,
    vector_column: str | None = None,
    embedding_model: str | None = None,
    embedder_factory: EmbedderFactory | None = None,
    write_timeout_s: float = 300.0,
    io_tasks: int = 2,
    progress: bool = True,
    on_progress: Callable[[int], None] | None = None,
) -> IngestReport:
    """Load JSON Lines (plain or ``.gz``) or Parquet files into ``corpus`` through Ray Data.

    ``file_format``: ``"jsonl"`` or ``"parquet"`` (default: a folder, a ``.parquet`` name
    or Parquet's magic bytes make the first path Parquet, anything else JSON Lines, plain
    or gzip — told by content, as ``tandem add`` tells it).
    ``gpus_per_actor``: ``None`` uses one GPU per embedding actor when the cluster has
    GPUs, else CPUs. ``embedder_factory`` must pickle (default: the engine's providers).
    ``io_tasks``: how many read, prepare and write tasks run at once; they reserve no
    CPU (the embedding actors own the CPU budget), so without a cap Ray Data would start
    a worker process per block.
    """
    if not 1 <= batch_size <= 10_000:
        raise InvalidArgument("batch_size must be in 1..10000")
    if not 1 <= embed_actors <= 1_024:
        raise InvalidArgument("embed_actors must be in 1..1024")
    if not 1 <= io_tasks <= 1_024:
        raise InvalidArgument("io_tasks must be in 1..1024")
    files = [str(p) for p in ([paths] if isinstance(paths, str | os.PathLike) else paths)]
    if not files:
        raise InvalidArgument("no input files")
    for name in files:
        if not Path(name).exists():
            raise InvalidArgument(f"no such file: {name}")
    kind = file_format or _format_of(files[0])
    spec = corpus.config.embedder
    if vector_column is not None:
        if spec is None:
            raise InvalidArgument("vectors given, but this corpus has vectors off")
        if embedding_model is None:
            raise InvalidArgument("vector_column needs embedding_model (the model that made them)")
        check_embedding_model(
            embedding_model, corpus._model_names(), corpus.name, has_embeddings=True
        )
    # The length every row's own vector must have: the corpus's stored one (the shards
    # say), else the embedder's. Neither (a corpus with no vectors yet, its provider down)
    # is refused: each batch took its first good vector's length then, and each empty
    # shard the first it was sent — one corpus held two lengths, and every later write
    # to one of its shards was refused.
    embedder = corpus._embedder
    known = corpus._dimension.refresh()  # the corpus's stored length (asked once)
    dimension = None
    if vector_column is not None and embedder is not None:
        dimension = known or dimension_if_up(embedder)
        if dimension is None:
            raise InvalidArgument(
                f"corpus {corpus.name!r} holds no vectors yet and its embedder cannot say "
                "their length now (is it down?): ingest the vectors once it answers"
            )
    handles = corpus._calls.handles
    shards = corpus.shards
    fields = dict(corpus.config.fields)
    if kind == "parquet":
        ds = _read_parquet(files, io_tasks)
    else:
        # Files as bytes, cut into lines by the loaders' own rules (``file_lines``): a
        # JSON reader's type inference would turn a column with one missing integer into
        # floats, and Ray's text reader splits at U+2028 and the like (legal inside a JSON
        # string), keeps a byte order mark, fails a whole file on one bad byte and tells
        # gzip by the file's name.
        ds = ray.data.read_binary_files(
            files, include_paths=True, num_cpus=0, concurrency=io_tasks
        ).flat_map(file_lines, num_cpus=0, concurrency=io_tasks)
    # On this dataset's own context (the ones made from it share it), not the process's:
    # ``progress=False`` there turned Ray Data's bars off for the rest of the process.
    ds.context.enable_progress_bars = progress
    ds = ds.map_batches(
        _prepare,  # type: ignore[arg-type]  # extra arguments come from fn_args
        fn_args=(
            handles,
            shards,
            fields,
            resume,
            vector_column,
            dimension,
            write_timeout_s,
            kind == "jsonl",
        ),
        batch_format="pyarrow",
        batch_size=batch_size,
        num_cpus=0,
        compute=ray.data.TaskPoolStrategy(size=io_tasks),
    )
    model = embedding_model
    if spec is not None and vector_column is None:
        gpus = _gpus(gpus_per_actor)
        ds = ds.map_batches(
            _Embed,
            # The corpus's stored length, which every embedded vector must have.
            fn_constructor_args=(spec, embedder_factory, gpus > 0, known),
            batch_format="pyarrow",
            batch_size=batch_size,
            num_cpus=0 if gpus else 1,
            num_gpus=gpus,
            compute=ray.data.ActorPoolStrategy(size=embed_actors),
        )
        model = (embedder_factory or default_embedder_factory)(spec).name
    ds = ds.map_batches(
        _write,  # type: ignore[arg-type]  # extra arguments come from fn_args
        fn_args=(handles, shards, model, write_timeout_s, known),
        batch_format="pyarrow",
        batch_size=batch_size,
        num_cpus=0,
        compute=ray.data.TaskPoolStrategy(size=io_tasks),
    )
    started = time.monotonic()
    written = skipped = rejected = 0
    rejections: list[str] = []
    with tqdm(disable=not progress, desc=f"ingest {corpus.name}", unit="doc") as bar:
        for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            counts = pa.table(batch).to_pydict()
            done = sum(counts["written"])
            written += done
            skipped += sum(counts["skipped"])
            rejected += sum(counts["rejected"])
            for reasons in counts["reasons"]:
                rejections.extend(reasons[: MAX_KEPT_REJECTIONS - len(rejections)])
            bar.update(done)
            if on_progress is not None:
                on_progress(written)
    seconds = time.monotonic() - started
    return IngestReport(written, skipped, rejected, seconds, tuple(rejections))


_PARQUET_MAGIC = b"PAR1"


def _format_of(path: str) -> str:
    """Parquet for a directory, a ``.parquet`` name or Parquet's magic bytes; else JSON
    Lines (plain or gzip, told by content as ``tandem add`` tells it)."""
    if path.lower().endswith(".parquet") or Path(path).is_dir():
        return "parquet"
    with open(path, "rb") as head:
        return "parquet" if head.read(4) == _PARQUET_MAGIC else "jsonl"


_READER_SWITCH = threading.Lock()
"""Held while ``DataContext.use_datasource_v2`` is switched off for one ``read_parquet``
(a process-wide flag: two ingests switching it at once left it off for good)."""


def _read_parquet(files: Sequence[str], io_tasks: int) -> ray.data.Dataset:
    """Ray Data's first Parquet reader, whatever the default: the newer one takes
    ``file_extensions=None`` for ``.parquet`` names only (a file named otherwise was "not
    found"), and lists several paths on threads that each import fsspec's HTTP filesystem
    (without aiohttp one of them failed: a folder given with another path crashed). The
    first resolves the paths once, here, and reads only what it was given."""
    context = ray.data.DataContext.get_current()
    extensions = _parquet_extensions(files)
    with _READER_SWITCH:
        newer, context.use_datasource_v2 = context.use_datasource_v2, False
        try:
            return ray.data.read_parquet(
                list(files), num_cpus=0, concurrency=io_tasks, file_extensions=extensions
            )
        finally:
            context.use_datasource_v2 = newer


def _parquet_extensions(files: Sequence[str]) -> list[str] | None:
    """Ray Data's ``file_extensions`` for these inputs: its default (``.parquet`` only)
    skips the ``_SUCCESS`` markers and such of a folder, and also every file named
    otherwise, though its magic bytes (or ``file_format``) say Parquet: "no files found".
    Files given one by one are read whatever their names."""
    folders = [f for f in files if Path(f).is_dir()]
    if not folders:
        return None
    if any(not f.lower().endswith(".parquet") for f in files if f not in folders):
        raise InvalidArgument(
            "Parquet files whose names do not end in .parquet cannot be loaded in one call "
            "with folders (whose other files are skipped): load them in a call of their own"
        )
    return ["parquet"]


def _gpus(gpus_per_actor: float | None) -> float:
    if gpus_per_actor is not None:
        return gpus_per_actor
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return 1.0 if resources.get("GPU", 0) >= 1 else 0.0


def _prepare(
    batch: pa.Table,
    handles: Sequence[Handle],
    shards: int,
    fields: dict[str, FieldType],
    resume: bool,
    vector_column: str | None,
    dimension: int | None,
    timeout_s: float,
    jsonl: bool,
) -> pa.Table:
    """The prepare stage (``engine.cluster.ingest_rows``), asking the shards which rows
    they already store with a vector when resuming."""

    def stored(ids: Sequence[str]) -> dict[str, str]:
        return _stored_with_vectors(handles, shards, ids, timeout_s)

    return prepared_batch(
        batch, fields, vector_column, dimension, jsonl, stored if resume else None
    )


def _stored_with_vectors(
    handles: Sequence[Handle], shards: int, ids: Sequence[str], timeout_s: float
) -> dict[str, str]:
    """Stored id -> content hash, for the ids stored with a vector."""
    stored: dict[str, str] = {}
    for index, positions in group_by_shard(ids, shards).items():
        state: dict[str, tuple[str, bool]] = _call_with_retry(
            handles[index], index, "content_state", ([ids[p] for p in positions],), timeout_s
        )
        stored.update((sid, digest) for sid, (digest, has_vector) in state.items() if has_vector)
    return stored


class _Embed(EmbeddingWorker):
    """Ray Data's view of a worker: embeds a batch's documents (not skipped or rejected).
    A batch the embedder fails on gets null vectors: its documents are written without
    them (stored degraded), not rejected."""

    def __call__(self, batch: pa.Table) -> pa.Table:
        kinds = batch.column(KIND).to_pylist()
        texts = batch.column(TEXT).to_pylist()
        todo = [i for i, k in enumerate(kinds) if k == "doc"]
        column: pa.Array = pa.nulls(len(kinds), type=pa.list_(pa.float32()))
        if todo:
            try:
                width = self.width
                embedded = checked_output(self.embed([texts[i] for i in todo]), len(todo), width)
            except EmbedderUnavailable as exc:  # InvalidOutput (checked_output's) is one
                logger.warning(
                    "embedding a batch of %d documents failed (%s); they are written "
                    "without vectors, degraded",
                    len(todo),
                    type(exc).__name__,
                )
            else:
                vectors = np.zeros((len(kinds), width), dtype=np.float32)
                vectors[todo] = embedded
                offsets = pa.array(np.arange(len(kinds) + 1) * width, type=pa.int32())
                column = pa.ListArray.from_arrays(offsets, pa.array(vectors.reshape(-1)))
        return batch.drop_columns([TEXT]).append_column(VECTOR, column)


def _write(
    batch: pa.Table,
    handles: Sequence[Handle],
    shards: int,
    model: str | None,
    timeout_s: float,
    expected: int | None = None,
) -> pa.Table:
    """Send the batch's documents to their shards; one summary row per batch.
    ``expected``: the corpus's vector length (``ShardActor.add``)."""

    def send(
        part: pa.Table, vectors: npt.NDArray[np.float32] | None, named: str | None
    ) -> tuple[int, list[str]]:
        return _send(part, vectors, handles, shards, named, timeout_s, expected)

    kinds = batch.column(KIND).to_pylist()
    reasons = [
        r for r, k in zip(batch.column(REASON).to_pylist(), kinds, strict=True) if k == "rejected"
    ]
    # Stored with this content and a vector: sent without one, so each shard keeps the
    # stored vector and applies the rest of the row.
    unchanged = [i for i, k in enumerate(kinds) if k == "skipped"]
    skipped = 0
    if unchanged:
        skipped, refused = send(batch.take(pa.array(unchanged)), None, None)
        reasons += refused
    keep = [i for i, k in enumerate(kinds) if k == "doc"]
    written = 0
    if keep:
        kept = batch.take(pa.array(keep))
        if VECTOR not in kept.column_names:
            written, refused = send(kept, None, model)
            reasons += refused
        else:
            column = kept.column(VECTOR).combine_chunks()
            valid = column.is_valid().to_numpy(zero_copy_only=False)
            if not valid.all():
                # The embedder failed on their batch: written without vectors (each
                # shard stores them degraded, or embeds them itself if it can, to the
                # corpus's length).
                rows = pa.array(np.flatnonzero(~valid))
                sent, refused = send(kept.take(rows), None, None)
                written += sent
                reasons += refused
                present = pa.array(np.flatnonzero(valid))
                kept, column = kept.take(present), column.take(present)
            # One length per batch, except when the corpus's was unknown and batches
            # of different first vectors met here: each length is sent on its own.
            lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
            for length in np.unique(lengths):
                rows = pa.array(np.flatnonzero(lengths == length))
                flat = column.take(rows).flatten().to_numpy(zero_copy_only=False)
                vectors = np.asarray(flat, dtype=np.float32).reshape(len(rows), int(length))
                sent, refused = send(kept.take(rows), vectors, model)
                written += sent
                reasons += refused
    return pa.table(
        {
            "written": [written],
            "skipped": [skipped],
            "rejected": [len(reasons)],
            "reasons": pa.array([reasons[:MAX_KEPT_REJECTIONS]], type=pa.list_(pa.string())),
        }
    )


def _send(
    part: pa.Table,
    vectors: npt.NDArray[np.float32] | None,
    handles: Sequence[Handle],
    shards: int,
    model: str | None,
    timeout_s: float,
    expected: int | None = None,
) -> tuple[int, list[str]]:
    """Add ``part``'s rows (with ``vectors``, or without) on their shards; returns how
    many were written and why the others were refused. A group a shard refuses
    (``InvalidArgument``) is split in halves until each refused row stands alone, as the
    single-node bulk loader does — unless both halves are refused with the group's own
    message: that refusal is about the group (a row-level one names a row, which only one
    half holds), so every row of it is refused with it, in 3 calls rather than 2n - 1."""
    rows = [pickle.loads(payload) for payload in part.column(PAYLOAD).to_pylist()]
    written = 0
    refused: list[str] = []

    def attempt(index: int, chosen: list[int]) -> str | None:
        """Send ``chosen`` to shard ``index``: None when written, else the refusal."""
        nonlocal written
        payload = ray.put([rows[p] for p in chosen])  # sent again as is on a retry
        part_vectors = None if vectors is None else vectors[chosen]
        args = (payload, part_vectors, None if part_vectors is None else model, expected)
        try:
            _call_with_retry(handles[index], index, "add", args, timeout_s)
        except InvalidArgument as exc:
            return str(exc)
        written += len(chosen)
        return None

    def settle(index: int, chosen: list[int], message: str) -> None:
        """``chosen`` was refused with ``message``: find the rows it is about."""
        if len(chosen) == 1:
            refused.append(f"{rows[chosen[0]]['id']}: {message}")
            return
        middle = len(chosen) // 2
        halves = (chosen[:middle], chosen[middle:])
        answers = [attempt(index, half) for half in halves]
        if answers == [message, message]:
            refused.extend(f"{rows[p]['id']}: {message}" for p in chosen)
            return
        for half, answer in zip(halves, answers, strict=True):
            if answer is not None:
                settle(index, half, answer)

    for index, positions in group_by_shard([r["id"] for r in rows], shards).items():
        chosen = list(positions)
        message = attempt(index, chosen)
        if message is not None:
            settle(index, chosen, message)
    return written, refused


def _call_with_retry(
    handle: Handle, index: int, method: str, args: tuple[Any, ...], timeout_s: float
) -> Any:
    """One shard call, sent again while the shard restarts (every call made here is
    idempotent: a read, or an upsert by id)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    while True:
        remaining = deadline - time.monotonic()
        try:
            return ray.get(getattr(handle, method).remote(*args), timeout=max(remaining, 0.001))
        except RayTaskError as exc:
            reraise_engine_error(exc)
            raise
        except (RayActorError, GetTimeoutError):
            if time.monotonic() + delay >= deadline:
                raise ShardUnavailable(
                    f"shard {index} did not answer for {timeout_s:g} s; its batch was not "
                    "written (run the ingest again to resume)",
                    (index,),
                ) from None
            logger.warning("shard %d is down; sending its %s again", index, method)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
