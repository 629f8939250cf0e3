"""Starting and stopping shard actors.

Each shard is ``ray.remote(ShardActor)`` with Ray's actor restarts (``max_restarts``) and
no Ray-level task retries: the coordinator itself retries writes and skips dead shards in
searches (``engine.cluster.calls``). With a ``placement`` in the manifest, a shard asks
for a sliver of its own custom resource, so Ray only ever runs it — and restarts it — on
the node that offers that resource: the node whose disk holds its directory. Detached
shards are named, outlive the process that started them, and are found again by name.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import ray

from engine.cluster.calls import Handle
from engine.cluster.manifest import ClusterManifest, read_manifest
from engine.cluster.options import ClusterOptions
from engine.cluster.runtime import NAMESPACE
from engine.cluster.shard import EmbedderFactory, ShardActor, ShardSpec
from engine.errors import InvalidArgument

logger = logging.getLogger(__name__)


def actor_name(manifest: ClusterManifest, index: int) -> str:
    """The detached actor's name: the corpus's and its manifest's uid (unique to its
    root), so a corpus of the same name elsewhere never finds this one's shards."""
    if manifest.uid is None:  # a manifest from before uids
        return f"{manifest.config.name}-shard-{index:03d}"
    return f"{manifest.config.name}-{manifest.uid}-shard-{index:03d}"


def start_shard(
    root: Path,
    manifest: ClusterManifest,
    index: int,
    factory: EmbedderFactory | None,
    opts: ClusterOptions,
    *,
    create: bool = False,
) -> Handle:
    """Start shard ``index`` (or, detached, find the running one); ``create``: the sharded
    corpus is being created, so the shard makes its corpus (``ShardSpec.create``)."""
    spec = ShardSpec(
        index=index,
        directory=str(manifest.shard_directory(root, index)),
        config=manifest.config,
        embedder_factory=factory,
        lock_wait_s=opts.lock_wait_s,
        create=create,
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
            name=actor_name(manifest, index),
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
        )
    try:
        actor = ray.remote(ShardActor).options(**options)
    except (ValueError, OverflowError) as exc:  # a resource name Ray keeps for itself
        # (see ``manifest``), or a quantity Ray cannot schedule
        raise InvalidArgument(f"shard {index} cannot start: {exc}") from None
    return actor.remote(spec)


def stop_detached(root: str | os.PathLike[str]) -> int:
    """Stop the detached shard actors of the sharded corpus in ``root``; returns how many."""
    manifest = read_manifest(Path(root))
    stopped = 0
    for index in range(manifest.shards):
        try:
            handle = ray.get_actor(actor_name(manifest, index), namespace=NAMESPACE)
        except ValueError:
            continue
        try:
            ray.get(handle.close.remote(), timeout=30)
        except Exception as exc:  # a dead shard has nothing to flush
            logger.warning("closing shard %d failed (%s)", index, type(exc).__name__)
        ray.kill(handle, no_restart=True)
        stopped += 1
    return stopped
